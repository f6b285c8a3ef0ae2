#!/usr/bin/env bash
# Builds everything the e2e cluster runs, from the Go module proxy only:
#   Kubernetes  kubelet, kube-controller-manager, kube-scheduler, kube-proxy,
#               kubectl (kube-apiserver comes from hack/envtest-assets.sh)
#   etcd        etcd (the server Kubernetes pins)
#   containerd  containerd, containerd-shim-runc-v2, ctr
#   Argo        workflow-controller, argoexec, argo (the CLI, and `argo server`
#               with Argo's own UI built from the module's ui/ with yarn and
#               webpack from the npm registry: test/e2e/dashboards.sh)
#   Tekton page the Tekton Dashboard's components (@tektoncd/dashboard-
#               components) in a page of ours, built with vite from npm
#               (test/e2e/dashboards.sh build_tekton_view)
#   Tekton      controller, webhook, entrypoint, nop, workingdirinit
#   conftest    conftest, the policy tool the plan-check scenario runs
#   crane       go-containerregistry's crane, whose `registry serve` is the
#               OCI registry of the OCI-source scenario
#   gitea       Gitea (code.gitea.io/gitea), the forge of the push-webhook
#               scenario: its server with SQLite (cgo), and the templates and
#               options it reads at run time
#   provider    terraform-provider-kubernetes, for real drift of a real
#               ConfigMap (baked into the e2e Terraform image as a local
#               provider mirror; terraform downloads nothing)
# Each upstream project is built through a throwaway wrapper module that
# requires the pinned version and copies its go.mod's replace/exclude blocks,
# so the dependency versions are the project's own. Binaries are cached under
# $OPR8R_CACHE/e2e/<project>-<version>/ (default ~/.cache/opr8r, outside the
# clone, so fresh clones reuse them); a second run is a no-op.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
KUBE_VERSION="${KUBE_VERSION:-1.36.3}"
CONTAINERD_VERSION="${CONTAINERD_VERSION:-2.2.0}"
ETCD_VERSION="${ETCD_VERSION:-3.6.8}"
ARGO_VERSION="$(awk '$1=="github.com/argoproj/argo-workflows/v3"{print substr($2,2)}' "${ROOT}/go.mod")"
TEKTON_VERSION="$(awk '$1=="github.com/tektoncd/pipeline"{print substr($2,2)}' "${ROOT}/go.mod")"
CACHE="${OPR8R_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/opr8r}"
OUT="${CACHE}/e2e"

log() { echo "e2e-build: $*" >&2; }

# wrapper MODULE VERSION DIR [extra go.mod lines...]: writes DIR/go.mod.
wrapper() {
  local mod="$1" ver="$2" dir="$3"; shift 3
  local gomod; gomod="$(go mod download -json "${mod}@v${ver}" | jq -r .GoMod)"
  {
    echo "module opr8r.local/e2ebuild"
    awk '$1=="go"{print; exit}' "${gomod}"
    awk '/^godebug \(/{p=1} p{print} p&&/^\)/{exit}' "${gomod}"
    echo "require ${mod} v${ver}"
    # Replaces into the project's own tree (=> ./x, => ../x) point at
    # sibling modules its go.mod also requires, at the versions the proxy serves.
    { grep -E '^(replace|exclude) [^(]' "${gomod}" || true
      awk '/^(replace|exclude) \(/{p=1} p{print} p&&/^\)/{p=0}' "${gomod}"; } | { grep -vE '=>[[:space:]]*\.\.?/' || true; }
    for l in "$@"; do echo "$l"; done
  } >"${dir}/go.mod"
}

# build NAME MODULE VERSION LDFLAGS EXTRA_GOMOD PKG... : builds PKGs into
# $OUT/NAME-VERSION unless every binary is already there.
# binname PKG: the file go build -o DIR/ writes for PKG (a /vN major
# version suffix is not part of it: go.etcd.io/etcd/server/v3 -> server).
binname() { local p="$1"; [[ "$(basename "$p")" =~ ^v[0-9]+$ ]] && p="$(dirname "$p")"; basename "$p"; }

build() {
  local name="$1" mod="$2" ver="$3" ldflags="$4" extra="$5"; shift 5
  local dest="${OUT}/${name}-${ver}" missing=0 p
  for p in "$@"; do [ -x "${dest}/$(binname "$p")" ] || missing=1; done
  [ "${missing}" = 1 ] || return 0
  mkdir -p "${dest}"
  local work; work="$(mktemp -d)"
  # shellcheck disable=SC2086
  wrapper "${mod}" "${ver}" "${work}" ${extra:+"$extra"}
  log "building ${name} v${ver}: $*"
  (
    cd "${work}"
    gets=(); for p in "$@"; do gets+=("${p}@v${ver}"); done
    GOFLAGS=-mod=mod go get "${gets[@]}" >&2
    ( while sleep 15; do printf '.' >&2; done ) & ticker=$!
    rc=0
    CGO_ENABLED=0 go build -trimpath -tags "${BUILD_TAGS:-}" -ldflags "-s -w ${ldflags}" -o "${dest}/" "$@" || rc=$?
    kill "${ticker}" 2>/dev/null || true; echo >&2
    if [ "${rc}" != 0 ]; then for p in "$@"; do rm -f "${dest}/$(binname "$p")"; done; fi
    exit "${rc}"
  )
  rm -rf "${work}"
}

kube_replaces() {
  local gomod; gomod="$(go mod download -json "k8s.io/kubernetes@v${KUBE_VERSION}" | jq -r .GoMod)"
  echo "replace ("
  sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/src/.*#\t\1 => \1 v0.'"${KUBE_VERSION#*.}"'#p' "${gomod}"
  echo ")"
}

what="${1:-all}"
# shellcheck source=test/e2e/dashboards.sh
. "${ROOT}/test/e2e/dashboards.sh"
# The Argo UI (node, mostly one core) builds while Go builds the rest.
ui_pid=""
if { [ "${what}" = all ] || [ "${what}" = argo ]; } && [ ! -f "${OUT}/argo-ui-${ARGO_VERSION}/app/index.html" ]; then
  mkdir -p "${OUT}"; build_argo_ui & ui_pid=$!
fi
if [ "${what}" = argo-ui ]; then build_argo_ui; fi
# The Tekton page (the Tekton Dashboard's components from npm) likewise.
tv_pid=""
if { [ "${what}" = all ] || [ "${what}" = tekton-view ]; } && [ ! -f "$(tekton_view_dir)/dist/index.html" ]; then
  mkdir -p "${OUT}"; build_tekton_view & tv_pid=$!
fi
minor="${KUBE_VERSION#*.}"; minor="${minor%%.*}"
if [ "${what}" = all ] || [ "${what}" = kube ]; then
  # The staging replaces must not be copied verbatim (they point into the
  # kubernetes repository), so kubernetes gets its own wrapper.
  dest="${OUT}/kube-${KUBE_VERSION}"
  need=0; for b in kubelet kube-controller-manager kube-scheduler kube-proxy kubectl; do [ -x "${dest}/${b}" ] || need=1; done
  if [ "${need}" = 1 ]; then
    mkdir -p "${dest}"; work="$(mktemp -d)"
    gomod="$(go mod download -json "k8s.io/kubernetes@v${KUBE_VERSION}" | jq -r .GoMod)"
    { echo "module opr8r.local/e2ebuild"; awk '$1=="go"{print; exit}' "${gomod}"; echo "require k8s.io/kubernetes v${KUBE_VERSION}"; kube_replaces; } >"${work}/go.mod"
    log "building Kubernetes v${KUBE_VERSION} node binaries (a few minutes cold)"
    (
      cd "${work}"
      GOFLAGS=-mod=mod go get "k8s.io/kubernetes/cmd/kubelet@v${KUBE_VERSION}" "k8s.io/kubernetes/cmd/kube-controller-manager@v${KUBE_VERSION}" \
        "k8s.io/kubernetes/cmd/kube-scheduler@v${KUBE_VERSION}" "k8s.io/kubernetes/cmd/kube-proxy@v${KUBE_VERSION}" "k8s.io/kubernetes/cmd/kubectl@v${KUBE_VERSION}" >&2
      ( while sleep 15; do printf '.' >&2; done ) & ticker=$!
      rc=0
      CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v${KUBE_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor} -X k8s.io/client-go/pkg/version.gitVersion=v${KUBE_VERSION}" \
        -o "${dest}/" k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl || rc=$?
      kill "${ticker}" 2>/dev/null || true; echo >&2; exit "${rc}"
    )
    rm -rf "${work}"
  fi
fi
if [ "${what}" = all ] || [ "${what}" = etcd ]; then
  # The etcd Kubernetes ${KUBE_VERSION} pins. Debian's 3.4.23 lacks
  # RequestWatchProgress, and then the API server ends every streaming-list
  # watch with an error: controllers see changes tens of seconds late.
  build etcd go.etcd.io/etcd/server/v3 "${ETCD_VERSION}" "" "" go.etcd.io/etcd/server/v3
fi
if [ "${what}" = all ] || [ "${what}" = containerd ]; then
  BUILD_TAGS=no_btrfs build containerd github.com/containerd/containerd/v2 "${CONTAINERD_VERSION}" \
    "-X github.com/containerd/containerd/v2/version.Version=v${CONTAINERD_VERSION}" "" \
    github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/ctr
fi
if [ "${what}" = all ] || [ "${what}" = argo ]; then
  # Argo is built from a copy of its module, for two files the zip lacks:
  # the argo CLI embeds the UI's dist/app (as Argo's Makefile does: the UI,
  # built above, is copied to ui/dist/app before go build), and a symlink.
  # The module cache is read-only and -overlay may not replace files in it.
  argodir="$(go mod download -json "github.com/argoproj/argo-workflows/v3@v${ARGO_VERSION}" | jq -r .Dir)"
  src="$(mktemp -d)/argo-workflows"
  if [ -n "${ui_pid}" ]; then wait "${ui_pid}" || { log "building the Argo UI failed"; exit 1; }; fi
  # An argo CLI cached before the UI was built (a placeholder page) is rebuilt.
  [ -f "${OUT}/argo-${ARGO_VERSION}/ui-embedded" ] || rm -f "${OUT}/argo-${ARGO_VERSION}/argo"
  if [ ! -x "${OUT}/argo-${ARGO_VERSION}/argo" ] || [ ! -x "${OUT}/argo-${ARGO_VERSION}/argoexec" ] || [ ! -x "${OUT}/argo-${ARGO_VERSION}/workflow-controller" ]; then
    cp -r "${argodir}" "${src}" && chmod -R u+w "${src}"
    mkdir -p "${src}/ui/dist" && cp -r "${OUT}/argo-ui-${ARGO_VERSION}/app" "${src}/ui/dist/app"
    # Upstream, osspecific/signal_linux.go is a git symlink to signal_darwin.go;
    # module zips drop symlinks, so argoexec does not build from the zip alone.
    osd="${src}/workflow/executor/osspecific"
    [ -e "${osd}/signal_linux.go" ] || ln -s signal_darwin.go "${osd}/signal_linux.go"
  fi
  build argo github.com/argoproj/argo-workflows/v3 "${ARGO_VERSION}" \
    "-X github.com/argoproj/argo-workflows/v3.version=v${ARGO_VERSION}" "replace github.com/argoproj/argo-workflows/v3 => ${src}" \
    github.com/argoproj/argo-workflows/v3/cmd/workflow-controller github.com/argoproj/argo-workflows/v3/cmd/argoexec github.com/argoproj/argo-workflows/v3/cmd/argo
  touch "${OUT}/argo-${ARGO_VERSION}/ui-embedded"
  rm -rf "$(dirname "${src}")"
fi
if [ "${what}" = all ] || [ "${what}" = tekton ]; then
  build tekton github.com/tektoncd/pipeline "${TEKTON_VERSION}" "" "" \
    github.com/tektoncd/pipeline/cmd/controller github.com/tektoncd/pipeline/cmd/webhook github.com/tektoncd/pipeline/cmd/entrypoint github.com/tektoncd/pipeline/cmd/nop github.com/tektoncd/pipeline/cmd/workingdirinit
fi
if [ "${what}" = all ] || [ "${what}" = provider ]; then
  # hashicorp/terraform-provider-kubernetes at its newest release the module
  # proxy serves: its module path has no /v2, so the proxy has only v1.x
  # tags (v1.13.4, 2020; plugin protocol 5, which terraform 1.11 speaks).
  # kubectl v0.19 imports vbom.ml/util, which moved to github.com/fvbommel/util
  # (the vanity host no longer serves it).
  TFK_VERSION="${TFK_VERSION:-1.13.4}"
  build tfprovider-kubernetes github.com/hashicorp/terraform-provider-kubernetes "${TFK_VERSION}" "" \
    "replace vbom.ml/util => github.com/fvbommel/util v0.0.0-20160121211510-db5cfe13f5cc" \
    github.com/hashicorp/terraform-provider-kubernetes
fi
if [ "${what}" = all ] || [ "${what}" = conftest ]; then
  # conftest, for the plan-check scenario (spec.checks, docs/checks.md): a
  # real Rego policy against a real plan. v0.56.0 is the newest release the
  # module proxy serves with a checksum-database entry.
  CONFTEST_VERSION="${CONFTEST_VERSION:-0.56.0}"
  build conftest github.com/open-policy-agent/conftest "${CONFTEST_VERSION}" \
    "-X github.com/open-policy-agent/conftest/internal/commands.version=${CONFTEST_VERSION}" "" \
    github.com/open-policy-agent/conftest
fi
if [ "${what}" = all ] || [ "${what}" = crane ]; then
  # crane (go-containerregistry, the version go.mod pins): its `registry
  # serve` is the OCI registry the OCI-source scenario runs in the cluster.
  GGCR_VERSION="$(awk '$1=="github.com/google/go-containerregistry"{print substr($2,2)}' "${ROOT}/go.mod")"
  build crane github.com/google/go-containerregistry "${GGCR_VERSION}" "" "" \
    github.com/google/go-containerregistry/cmd/crane
fi
if [ "${what}" = all ] || [ "${what}" = gitea ]; then
  # Gitea, the forge of the push-webhook scenario (docs/pull-requests.md):
  # built in its own module (its go.mod and go.sum, as released) with cgo
  # for SQLite; without the bindata tag it reads its templates and options
  # from disk, copied beside it. Its web UI's scripts (webpack) are not
  # built: the scenario uses the API and git over HTTP.
  GITEA_VERSION="${GITEA_VERSION:-1.25.4}"
  dest="${OUT}/gitea-${GITEA_VERSION}"
  if [ ! -x "${dest}/gitea" ] || [ ! -d "${dest}/static/templates" ]; then
    src="$(go mod download -json "code.gitea.io/gitea@v${GITEA_VERSION}" | jq -r .Dir)"
    log "building gitea v${GITEA_VERSION}"
    mkdir -p "${dest}/static"
    ( while sleep 15; do printf '.' >&2; done ) & ticker=$!
    rc=0
    ( cd "${src}" && CGO_ENABLED=1 GOFLAGS=-mod=readonly go build -trimpath -tags "sqlite sqlite_unlock_notify" \
        -ldflags "-s -w -X main.Version=${GITEA_VERSION}" -o "${dest}/gitea" . ) || rc=$?
    kill "${ticker}" 2>/dev/null || true; echo >&2
    [ "${rc}" = 0 ] || { rm -f "${dest}/gitea"; exit "${rc}"; }
    rm -rf "${dest}/static/templates" "${dest}/static/options"
    cp -r "${src}/templates" "${src}/options" "${dest}/static/"
    chmod -R u+w "${dest}/static"
  fi
fi
if [ -n "${tv_pid}" ]; then wait "${tv_pid}" || { log "building the Tekton page failed"; exit 1; }; fi
log "ready: $(cd "${OUT}" && ls -d -- */ | tr -d / | tr '\n' ' ')"
