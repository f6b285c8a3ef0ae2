{{- define "opr8r.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}{{ .Release.Name | trunc 63 | trimSuffix "-" }}{{- else -}}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "opr8r.labels" -}}
app.kubernetes.io/name: opr8r
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "opr8r.selector" -}}
app.kubernetes.io/name: opr8r
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "opr8r.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "opr8r.engines" -}}
{{- $e := list -}}
{{- if .Values.engines.argo.enabled }}{{ $e = append $e "argo" }}{{ end -}}
{{- if .Values.engines.tekton.enabled }}{{ $e = append $e "tekton" }}{{ end -}}
{{- if not $e }}{{ fail "enable at least one engine (engines.argo.enabled or engines.tekton.enabled)" }}{{ end -}}
{{- if not (has .Values.defaultEngine $e) }}{{ fail (printf "defaultEngine %q is not enabled" .Values.defaultEngine) }}{{ end -}}
{{ join "," $e }}
{{- end -}}
