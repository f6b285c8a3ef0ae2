#!/usr/bin/env bash
# Produces the envtest binaries (kube-apiserver and etcd) on a fresh machine
# using only the Go module proxy and Debian's packages.
#
#   kube-apiserver: built from k8s.io/kubernetes at KUBE_VERSION through a
#                   throwaway wrapper module that replaces every staging module
#                   (k8s.io/<x> => ./staging/src/k8s.io/<x> upstream) with the
#                   published k8s.io/<x> v0.<minor>.<patch>.
#   etcd:           Debian's etcd-server package.
#
# Binaries land in $OPR8R_CACHE/k8s/<KUBE_VERSION>/ (default ~/.cache/opr8r), which is what KUBEBUILDER_ASSETS
# points at. A second run is a no-op. The script prints the assets directory
# as its last line.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-1.36.3}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${OPR8R_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/opr8r}"
ASSETS="${CACHE}/k8s/${KUBE_VERSION}"
mkdir -p "${ASSETS}"

log() { echo "envtest-assets: $*" >&2; }

build_apiserver() {
  local staging_version="v0.${KUBE_VERSION#*.}"
  local gomod work
  gomod="$(go mod download -json "k8s.io/kubernetes@v${KUBE_VERSION}" | jq -r .GoMod)"
  work="$(mktemp -d)"
  trap 'rm -rf "${work}"' RETURN
  {
    echo "module opr8r.local/kubebuild"
    echo
    echo "go $(awk '$1=="go"{print $2; exit}' "${gomod}")"
    echo
    echo "require k8s.io/kubernetes v${KUBE_VERSION}"
    echo
    echo "replace ("
    sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/src/.*#\t\1 => \1 '"${staging_version}"'#p' "${gomod}"
    echo ")"
  } >"${work}/go.mod"
  log "building kube-apiserver v${KUBE_VERSION} from the module proxy (about 4 minutes cold, ~2 GB RAM)..."
  local minor="${KUBE_VERSION#*.}"; minor="${minor%%.*}"
  local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v${KUBE_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor}"
  (
    cd "${work}"
    GOFLAGS=-mod=mod go get "k8s.io/kubernetes/cmd/kube-apiserver@v${KUBE_VERSION}" >&2
    # Progress, not silence: print a dot every 15s while the compiler works.
    ( while sleep 15; do printf '.' >&2; done ) & ticker=$!
    CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o "${ASSETS}/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
    rc=$?
    kill "${ticker}" 2>/dev/null || true
    echo >&2
    exit "${rc}"
  )
  mv "${ASSETS}/kube-apiserver.tmp" "${ASSETS}/kube-apiserver"
}

install_etcd() {
  if ! command -v etcd >/dev/null 2>&1 && [ ! -x /usr/bin/etcd ]; then
    log "installing etcd from Debian (etcd-server)..."
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    ${SUDO} apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive ${SUDO} apt-get install -y -qq etcd-server >&2
  fi
  cp "$(command -v etcd || echo /usr/bin/etcd)" "${ASSETS}/etcd"
}

command -v jq >/dev/null 2>&1 || { log "jq is required (apt-get install jq)"; exit 1; }

if [ ! -x "${ASSETS}/kube-apiserver" ]; then build_apiserver; fi
if [ ! -x "${ASSETS}/etcd" ]; then install_etcd; fi
"${ASSETS}/kube-apiserver" --version >&2
"${ASSETS}/etcd" --version 2>&1 | sed -n 1p >&2 || true
echo "${ASSETS}"
