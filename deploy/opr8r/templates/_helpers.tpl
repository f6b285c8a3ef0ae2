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

{{- /* The pod selector of one shard's Deployment: (list $ shardName). */ -}}
{{- define "opr8r.shardSelector" -}}
{{- $ := index . 0 -}}{{- $shard := index . 1 -}}
{{- if $shard -}}
app.kubernetes.io/name: opr8r-shard
app.kubernetes.io/instance: {{ $.Release.Name }}
sharding.opr8r.io/shard: {{ $shard | quote }}
{{- else -}}
{{ include "opr8r.selector" $ }}
{{- end -}}
{{- end -}}

{{- define "opr8r.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- /* Every engine the chart ships (one RBAC file each, generated) is
enabled unless engines.<name>.enabled is false. */ -}}
{{- define "opr8r.engineList" -}}
{{- $e := list -}}
{{- range $path, $_ := .Files.Glob "files/rbac/engines/*.yaml" -}}
{{- $name := base $path | trimSuffix ".yaml" -}}
{{- $v := index ($.Values.engines | default dict) $name | default dict -}}
{{- if ne (toString (index $v "enabled")) "false" }}{{ $e = append $e $name }}{{ end -}}
{{- end -}}
{{ join "," $e }}
{{- end -}}

{{- define "opr8r.engines" -}}
{{- $e := include "opr8r.engineList" . | splitList "," | compact -}}
{{- if not $e }}{{ fail "enable at least one engine (every engines.<name>.enabled is false)" }}{{ end -}}
{{- if and .Values.defaultEngine (not (has .Values.defaultEngine $e)) }}{{ fail (printf "defaultEngine %q is not enabled" .Values.defaultEngine) }}{{ end -}}
{{ join "," $e }}
{{- end -}}

{{- /* The manager's scope: the namespaces it watches (watchNamespaces), or
every namespace with clusterWide: true, chosen explicitly. Fails with the
value to set otherwise. */ -}}
{{- define "opr8r.checkScope" -}}
{{- if and .Values.clusterWide .Values.watchNamespaces -}}
{{- fail "set either watchNamespaces (the namespaces the manager watches, with its rights there only) or clusterWide=true (every namespace, rights cluster-wide), not both" -}}
{{- end -}}
{{- if not (or .Values.clusterWide .Values.watchNamespaces) -}}
{{- fail "watchNamespaces is required: the namespaces whose TerraformRuns the manager reconciles, where it gets its rights (--set watchNamespaces={team-a}); a manager of every namespace, which may read every Secret in the cluster, needs clusterWide=true set explicitly" -}}
{{- end -}}
{{- end -}}

{{- /* Where the metrics certificate (metrics.certSecret) is mounted. */ -}}
{{- define "opr8r.metricsCertDir" -}}/etc/opr8r/metrics-certs{{- end -}}
