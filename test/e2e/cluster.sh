#!/usr/bin/env bash
# A single-node Kubernetes cluster on this machine, built from source:
#   etcd 3.6, kube-apiserver, kube-controller-manager, kube-scheduler,
#   kubelet, kube-proxy (v1.36.3), containerd 2.2 with runc and CNI (Debian),
#   a local-path volume provisioner, Argo Workflows and Tekton Pipelines from
#   their pinned module manifests, and opr8r from this checkout (Helm chart);
#   Argo Server with Argo's UI, and the Tekton page of the Tekton Dashboard's
#   components (test/e2e/dashboards.sh).
#
#   test/e2e/cluster.sh up      bring it up (upstream builds are cached in $OPR8R_CACHE/e2e,
#                               opr8r's own binaries and the images in bin/e2e)
#   test/e2e/cluster.sh down    stop what "up" started and remove its traces
#   test/e2e/cluster.sh status
#   test/e2e/cluster.sh restart-apiserver [SECONDS]   (make chaos)
#
#   test/e2e/cluster.sh can-run exit 0 if this machine can run the cluster
#
# Every process runs on the host, as root, with state under $E2E_STATE
# (default /var/lib/opr8r-e2e). The admin kubeconfig is $E2E_STATE/admin.kubeconfig.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
S="${E2E_STATE:-/var/lib/opr8r-e2e}"
KUBE_VERSION="${KUBE_VERSION:-1.36.3}"
CONTAINERD_VERSION="${CONTAINERD_VERSION:-2.2.0}"
# etcd is built (test/e2e/build.sh): Debian's 3.4.23 lacks RequestWatchProgress,
# and a 1.36 API server then ends clients' streaming-list watches with an
# error, so controllers (Argo's among them) see changes tens of seconds late.
ETCD_VERSION="${ETCD_VERSION:-3.6.8}"
CACHE="${OPR8R_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/opr8r}"
EBIN="${CACHE}/e2e/etcd-${ETCD_VERSION}"
ARGO_VERSION="$(awk '$1=="github.com/argoproj/argo-workflows/v3"{print substr($2,2)}' "${ROOT}/go.mod")"
TEKTON_VERSION="$(awk '$1=="github.com/tektoncd/pipeline"{print substr($2,2)}' "${ROOT}/go.mod")"
# Argo's controller looks at one Workflow at most once per
# DEFAULT_REQUEUE_TIME (10s unless set), and every hand-off from one step's
# pod to the next waits for it: 2s takes a trivial Argo run from about 60 s
# to about 43 s (docs/install.md, "The engines, for short runs").
ARGO_REQUEUE_TIME="${ARGO_REQUEUE_TIME:-2s}"
# Tekton's running-in-environment-with-injected-sidecars ("true" unless
# set): the first step of every task's pod waits until Tekton's controller
# has annotated the pod ready and the kubelet has written that into the
# pod's downward API volume. This cluster injects no sidecars; "false"
# takes a trivial Tekton run from about 10.4 s to 7.4 s, and ten at once
# from a p95 of 107 s (pods stalled for a minute on that file) to 34 s
# (docs/install.md, "The engines, for short runs").
TEKTON_INJECTED_SIDECARS="${TEKTON_INJECTED_SIDECARS:-false}"
# The longest a pod the scheduler refused stays parked before it is tried
# again without an event that could make it fit (5m unless set; flushed
# every 30 s). A refused pod waits for an event (a claim bound, a pod's end)
# to be requeued; a missed requeue cost TestTektonDashboard its 5-minute
# wait once, when its plan pod was refused for CPU and then for an unbound
# claim. 30s bounds such a miss to about a minute. The flag is deprecated
# but served by kube-scheduler 1.36.
SCHEDULER_PARK_MAX="${SCHEDULER_PARK_MAX:-30s}"
KBIN="${CACHE}/e2e/kube-${KUBE_VERSION}"
CBIN="${CACHE}/e2e/containerd-${CONTAINERD_VERSION}"
ABIN="${CACHE}/e2e/argo-${ARGO_VERSION}"
TBIN="${CACHE}/e2e/tekton-${TEKTON_VERSION}"
TFK_VERSION="${TFK_VERSION:-1.13.4}"
PBIN="${CACHE}/e2e/tfprovider-kubernetes-${TFK_VERSION}"
CONFTEST_VERSION="${CONFTEST_VERSION:-0.56.0}"
FBIN="${CACHE}/e2e/conftest-${CONFTEST_VERSION}"
GGCR_VERSION="$(awk '$1=="github.com/google/go-containerregistry"{print substr($2,2)}' "${ROOT}/go.mod")"
RBIN="${CACHE}/e2e/crane-${GGCR_VERSION}"
APISERVER="${CACHE}/k8s/${KUBE_VERSION}/kube-apiserver"
IMAGES="${ROOT}/bin/e2e/images"
KUBECTL="${KBIN}/kubectl"
HELM="${HELM:-${CACHE}/tools/helm-v3.19.0/helm}"
KUSTOMIZE="${KUSTOMIZE:-${CACHE}/tools/kustomize-v5.7.1/kustomize}"
SOCK="${S}/containerd/containerd.sock"
NODE="$(hostname | tr '[:upper:]' '[:lower:]')"
E2E_IMAGE_TAG="e2e"
OPR8R_IMAGE="localhost/opr8r/opr8r:${E2E_IMAGE_TAG}"
TERRAFORM_IMAGE="localhost/opr8r/terraform:${E2E_IMAGE_TAG}"
PAUSE_IMAGE="registry.k8s.io/pause:3.10"
STOCK_TERRAFORM_IMAGE="docker.io/hashicorp/terraform:$(terraform version -json 2>/dev/null | jq -r '.terraform_version' | cut -d. -f1,2)"
SHELL_IMAGE="localhost/opr8r/busybox:${E2E_IMAGE_TAG}"
CONFTEST_IMAGE="localhost/opr8r/conftest:v${CONFTEST_VERSION}"
REGISTRY_IMAGE="localhost/opr8r/registry:v${GGCR_VERSION}"
MIRROR_IMAGE="localhost/opr8r/provider-mirror:${E2E_IMAGE_TAG}"
# The provider mirror's Service: a fixed address, as the registry's (the
# cluster runs no DNS); its certificate names it.
MIRROR_IP="10.96.200.201"
# The state API's Service (the manager's; pkg/stateapi), fixed for the same
# reason.
STATE_API_IP="10.96.200.202"

# shellcheck source=test/e2e/dashboards.sh
. "${ROOT}/test/e2e/dashboards.sh"

t0=$(date +%s)
log() { echo "e2e-cluster [$(( $(date +%s) - t0 ))s] $*" >&2; }
die() { echo "e2e-cluster: FATAL: $*" >&2; exit 1; }
kc() { "${KUBECTL}" --kubeconfig "${S}/admin.kubeconfig" "$@"; }

node_ip() { ip -4 -o addr show scope global | awk '{print $4}' | cut -d/ -f1 | head -1; }

# ---------------------------------------------------------------- preflight
preflight() {
  [ "$(id -u)" = 0 ] || die "the e2e cluster runs kubelet, containerd and iptables and needs root (uid 0); this is uid $(id -u)"
  local need=() p
  for p in runc:runc iptables:iptables conntrack:conntrack openssl:openssl busybox:busybox-static jq:jq chromium:chromium; do
    command -v "${p%%:*}" >/dev/null 2>&1 || need+=("${p#*:}")
  done
  [ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
  if [ "${#need[@]}" -gt 0 ]; then
    log "installing Debian packages: ${need[*]}"
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2 \
      || die "could not install ${need[*]} from Debian"
  fi
  grep -qw cgroup /proc/mounts || die "no cgroup filesystem is mounted: containers cannot run on this machine"
  [ -n "$(node_ip)" ] || die "no global IPv4 address: the API server needs a node IP that is not loopback"
}

# ---------------------------------------------------------------- builds
build_all() {
  log "building (cached in ${CACHE}): kube-apiserver, node binaries, containerd, Argo, Tekton, opr8r"
  make -C "${ROOT}" --no-print-directory envtest-assets tools >&2
  bash "${ROOT}/test/e2e/build.sh" all
  mkdir -p "${ROOT}/bin/e2e/opr8r"
  (cd "${ROOT}" && CGO_ENABLED=0 go build -trimpath -o bin/e2e/opr8r/ ./cmd/manager ./cmd/opr8r-step ./cmd/kubectl-tfrun \
     ./test/e2e/pause ./test/e2e/provisioner ./test/e2e/imagebuild ./test/e2e/tektonview ./test/e2e/providermirror)
}

# image NAME REF ARGS...: builds bin/e2e/images/NAME.tar unless its inputs are unchanged.
image() {
  local name="$1" ref="$2"; shift 2
  local out="${IMAGES}/${name}.tar" key
  key="$( { echo "${ref} $*"; for a in "$@"; do case "$a" in /*:/*) sha256sum "${a%%:*}" | cut -c1-64;; esac; done; } | sha256sum | cut -c1-16)"
  if [ -f "${out}" ] && [ "$(cat "${out}.key" 2>/dev/null)" = "${key}" ]; then return 0; fi
  "${ROOT}/bin/e2e/opr8r/imagebuild" -ref "${ref}" -out "${out}" "$@"
  echo "${key}" >"${out}.key"
}

build_images() {
  mkdir -p "${IMAGES}"
  local bb; bb="$(command -v busybox)"
  local bbl=(-file "${bb}:/bin/busybox" -symlink /bin/sh:busybox -symlink /bin/ls:busybox -symlink /bin/cat:busybox
             -symlink /bin/mkdir:busybox -symlink /bin/cp:busybox -symlink /bin/rm:busybox -symlink /bin/sleep:busybox
             -symlink /bin/echo:busybox -symlink /bin/chmod:busybox -symlink /bin/ln:busybox)
  image pause "${PAUSE_IMAGE}" -file "${ROOT}/bin/e2e/opr8r/pause:/pause" -entrypoint /pause -user 65535:65535
  image busybox "${SHELL_IMAGE}" "${bbl[@]}" -entrypoint /bin/sh
  image workflow-controller "quay.io/argoproj/workflow-controller:v${ARGO_VERSION}" \
    -file "${ABIN}/workflow-controller:/bin/workflow-controller" -entrypoint /bin/workflow-controller -user 8737:8737
  image argoexec "quay.io/argoproj/argoexec:v${ARGO_VERSION}" \
    -file "${ABIN}/argoexec:/bin/argoexec" "${bbl[@]}" -entrypoint /bin/argoexec -user 8737:8737
  argo_server_image
  tekton_view_image
  local b
  for b in controller webhook entrypoint nop workingdirinit; do
    image "tekton-${b}" "localhost/tekton/${b}:v${TEKTON_VERSION}" -file "${TBIN}/${b}:/ko-app/${b}" -entrypoint "/ko-app/${b}" -user 65532:65532
  done
  # The kubernetes provider sits in one of terraform's implied local mirror
  # directories, so modules that require it install it from there.
  image terraform "${TERRAFORM_IMAGE}" -file "$(command -v terraform):/bin/terraform" "${bbl[@]}" \
    -file "${PBIN}/terraform-provider-kubernetes:/usr/local/share/terraform/plugins/registry.terraform.io/hashicorp/kubernetes/${TFK_VERSION}/linux_amd64/terraform-provider-kubernetes_v${TFK_VERSION}" \
    -entrypoint /bin/terraform
  # The plan-check scenario's policy tool (spec.checks), with sh for scripts.
  image conftest "${CONFTEST_IMAGE}" -file "${FBIN}/conftest:/bin/conftest" "${bbl[@]}" -entrypoint /bin/conftest -user 65532:65532
  # The OCI-source scenario's registry (crane registry serve, in memory).
  image registry "${REGISTRY_IMAGE}" -file "${RBIN}/crane:/bin/crane" -entrypoint /bin/crane -user 65532:65532
  # The provider network mirror the install points terraform at
  # (providers.mirror): the same source-built kubernetes provider, served
  # over TLS, so runs fetch it from there, not from the image's directory.
  image provider-mirror "${MIRROR_IMAGE}" -file "${ROOT}/bin/e2e/opr8r/providermirror:/providermirror" \
    -file "${PBIN}/terraform-provider-kubernetes:/providers/terraform-provider-kubernetes_v${TFK_VERSION}" \
    -entrypoint /providermirror -user 65532:65532
  image opr8r "${OPR8R_IMAGE}" -file "${ROOT}/bin/e2e/opr8r/manager:/manager" -file "${ROOT}/bin/e2e/opr8r/opr8r-step:/opr8r-step" \
    -entrypoint /manager -user 65532:65532
}

# ---------------------------------------------------------------- PKI
cert() { # cert NAME CN O [SANs]
  local name="$1" cn="$2" o="$3" san="${4:-}"
  [ -f "${S}/pki/${name}.crt" ] && return 0
  openssl genrsa -out "${S}/pki/${name}.key" 2048 2>/dev/null
  local subj="/CN=${cn}"; [ -n "${o}" ] && subj="/O=${o}${subj}"
  openssl req -new -key "${S}/pki/${name}.key" -subj "${subj}" -out "${S}/pki/${name}.csr" 2>/dev/null
  local ext="${S}/pki/${name}.ext"
  { echo "basicConstraints=CA:FALSE"; echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=serverAuth,clientAuth"; [ -n "${san}" ] && echo "subjectAltName=${san}"; } >"${ext}"
  openssl x509 -req -in "${S}/pki/${name}.csr" -CA "${S}/pki/ca.crt" -CAkey "${S}/pki/ca.key" -CAcreateserial \
    -days 30 -extfile "${ext}" -out "${S}/pki/${name}.crt" 2>/dev/null
}

kubeconfig() { # kubeconfig NAME CERT
  cat >"${S}/$1.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- cluster: {certificate-authority: ${S}/pki/ca.crt, server: "https://$(node_ip):6443"}
  name: e2e
users:
- name: $1
  user: {client-certificate: ${S}/pki/$2.crt, client-key: ${S}/pki/$2.key}
contexts:
- context: {cluster: e2e, user: $1, namespace: default}
  name: e2e
current-context: e2e
KC
}

pki() {
  mkdir -p "${S}/pki"
  if [ ! -f "${S}/pki/ca.crt" ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "${S}/pki/ca.key" -out "${S}/pki/ca.crt" -days 30 \
      -subj "/CN=opr8r-e2e-ca" 2>/dev/null
    openssl genrsa -out "${S}/pki/sa.key" 2048 2>/dev/null
    openssl rsa -in "${S}/pki/sa.key" -pubout -out "${S}/pki/sa.pub" 2>/dev/null
  fi
  local ip; ip="$(node_ip)"
  cert apiserver kube-apiserver "" "IP:127.0.0.1,IP:10.96.0.1,IP:${ip},DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost"
  cert admin opr8r-e2e-admin system:masters
  cert apiserver-kubelet apiserver-kubelet-client system:masters
  cert kcm system:kube-controller-manager ""
  cert scheduler system:kube-scheduler ""
  cert proxy system:kube-proxy ""
  cert node "system:node:${NODE}" system:nodes "IP:${ip},DNS:${NODE}"
  cert provisioner opr8r-e2e-provisioner system:masters
  cert provider-mirror provider-mirror "" "IP:${MIRROR_IP},DNS:provider-mirror.opr8r-system.svc"
  # Two people with their own client certificates, in a group that the e2e
  # test binds to opr8r-approver: approvals by distinct users.
  cert alice opr8r-e2e-alice e2e-approvers
  cert bob opr8r-e2e-bob e2e-approvers
  # Tenants (docs/security.md): mallory and trent hold Kubernetes' edit and
  # opr8r-editor in e2e (trent also opr8r-approver: a lead who edits and
  # approves); eve holds them in default, the namespace next door.
  cert mallory opr8r-e2e-mallory e2e-tenants
  cert trent opr8r-e2e-trent e2e-tenants
  cert eve opr8r-e2e-eve default-tenants
  kubeconfig admin admin; kubeconfig kcm kcm; kubeconfig scheduler scheduler; kubeconfig proxy proxy
  kubeconfig node node; kubeconfig provisioner provisioner; kubeconfig alice alice; kubeconfig bob bob
  kubeconfig mallory mallory; kubeconfig trent trent; kubeconfig eve eve
}

# ---------------------------------------------------------------- processes
start() { # start NAME CMD...: background, logs in $S/logs/NAME.log, pid in $S/pids/NAME
  local name="$1"; shift
  mkdir -p "${S}/logs" "${S}/pids"
  if [ -f "${S}/pids/${name}" ] && kill -0 "$(cat "${S}/pids/${name}")" 2>/dev/null; then return 0; fi
  # 9>&-: not the e2e lock run.sh and dev.sh hold (a daemon that kept it
  # would hold it for as long as a kept cluster runs: E2E_KEEP=1, make dev).
  setsid "$@" >"${S}/logs/${name}.log" 2>&1 < /dev/null 9>&- &
  echo $! >"${S}/pids/${name}"
}

wait_for() { # wait_for SECONDS WHAT CMD...
  local deadline=$(( $(date +%s) + $1 )) what="$2"; shift 2
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "${deadline}" ]; then
      echo "e2e-cluster: timed out waiting for ${what}; last log lines:" >&2
      tail -n 30 "${S}"/logs/*.log >&2 || true
      die "timed out waiting for ${what}"
    fi
    sleep 0.5
  done
}

containerd_up() {
  mkdir -p "${S}/containerd" "${S}/cni/net.d" "${S}/cni/ipam" "${S}/runc"
  cat >"${S}/containerd/config.toml" <<TOML
version = 3
root = "${S}/containerd/root"
state = "${S}/containerd/state"
[grpc]
  address = "${SOCK}"
[ttrpc]
  address = "${SOCK}.ttrpc"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "${PAUSE_IMAGE}"
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        SystemdCgroup = false
        Root = "${S}/runc"
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "${S}/cni/net.d"
TOML
  cat >"${S}/cni/net.d/10-opr8r-e2e.conflist" <<JSON
{"cniVersion": "1.0.0", "name": "opr8r-e2e", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "${S}/cni/ipam", "ranges": [[{"subnet": "10.244.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
JSON
  sysctl -qw net.ipv4.ip_forward=1
  [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ] && sysctl -qw net.bridge.bridge-nf-call-iptables=1 || true
  PATH="${CBIN}:${PATH}" start containerd "${CBIN}/containerd" --config "${S}/containerd/config.toml"
  wait_for 30 containerd "${CBIN}/ctr" --address "${SOCK}" version
}

load_images() {
  local f
  for f in "${IMAGES}"/*.tar; do
    "${CBIN}/ctr" --address "${SOCK}" -n k8s.io images import "${f}" >/dev/null 2>"${S}/logs/ctr-import.log" \
      || { cat "${S}/logs/ctr-import.log" >&2; die "ctr could not import ${f}"; }
  done
  # Examples and the chart's default name Docker Hub's Terraform image; on
  # this registry-less node that name is the local build of the same binary.
  "${CBIN}/ctr" --address "${SOCK}" -n k8s.io images tag --force "${TERRAFORM_IMAGE}" "${STOCK_TERRAFORM_IMAGE}" >/dev/null 2>&1 \
    || die "could not tag ${TERRAFORM_IMAGE} as ${STOCK_TERRAFORM_IMAGE}"
  log "images: $("${CBIN}/ctr" --address "${SOCK}" -n k8s.io images ls -q | grep -v '^sha256' | tr '\n' ' ')"
}

control_plane_up() {
  local ip; ip="$(node_ip)"
  mkdir -p "${S}/etcd"
  start etcd "${EBIN}/server" --data-dir "${S}/etcd" \
    --listen-client-urls http://127.0.0.1:12379 --advertise-client-urls http://127.0.0.1:12379 \
    --listen-peer-urls http://127.0.0.1:12380 --initial-advertise-peer-urls http://127.0.0.1:12380 \
    --initial-cluster default=http://127.0.0.1:12380 --quota-backend-bytes 4294967296
  wait_for 30 etcd curl -fsS http://127.0.0.1:12379/health
  start kube-apiserver "${APISERVER}" --etcd-servers http://127.0.0.1:12379 \
    --advertise-address "${ip}" --bind-address 0.0.0.0 --secure-port 6443 \
    --service-cluster-ip-range 10.96.0.0/16 --authorization-mode Node,RBAC \
    --client-ca-file "${S}/pki/ca.crt" --tls-cert-file "${S}/pki/apiserver.crt" --tls-private-key-file "${S}/pki/apiserver.key" \
    --kubelet-client-certificate "${S}/pki/apiserver-kubelet.crt" --kubelet-client-key "${S}/pki/apiserver-kubelet.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "${S}/pki/sa.pub" --service-account-signing-key-file "${S}/pki/sa.key" \
    --allow-privileged=true --enable-admission-plugins NodeRestriction
  wait_for 60 kube-apiserver kc get --raw /readyz
  start kube-controller-manager "${KBIN}/kube-controller-manager" --kubeconfig "${S}/kcm.kubeconfig" \
    --authentication-kubeconfig "${S}/kcm.kubeconfig" --authorization-kubeconfig "${S}/kcm.kubeconfig" \
    --use-service-account-credentials --root-ca-file "${S}/pki/ca.crt" \
    --service-account-private-key-file "${S}/pki/sa.key" \
    --cluster-signing-cert-file "${S}/pki/ca.crt" --cluster-signing-key-file "${S}/pki/ca.key" \
    --leader-elect=false --bind-address 127.0.0.1 --secure-port 10257 --controllers '*'
  start kube-scheduler "${KBIN}/kube-scheduler" --kubeconfig "${S}/scheduler.kubeconfig" \
    --authentication-kubeconfig "${S}/scheduler.kubeconfig" --authorization-kubeconfig "${S}/scheduler.kubeconfig" \
    --leader-elect=false --bind-address 127.0.0.1 --secure-port 10259 \
    --pod-max-in-unschedulable-pods-duration "${SCHEDULER_PARK_MAX}"
}

start_node() {
  local ip; ip="$(node_ip)"
  mkdir -p "${S}/kubelet" "${S}/pod-logs"
  cat >"${S}/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://${SOCK}
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: ${S}/pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: ${S}/pki/node.crt
tlsPrivateKeyFile: ${S}/pki/node.key
podLogsDir: ${S}/pod-logs
clusterDomain: cluster.local
failSwapOn: false
serializeImagePulls: false
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
maxPods: 60
YAML
  start kubelet "${KBIN}/kubelet" --config "${S}/kubelet.yaml" --kubeconfig "${S}/node.kubeconfig" \
    --root-dir "${S}/kubelet" --node-ip "${ip}" --hostname-override "${NODE}"
  cat >"${S}/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: ${S}/proxy.kubeconfig}
conntrack: {maxPerCore: 0}
clusterCIDR: 10.244.0.0/24
hostnameOverride: ${NODE}
YAML
  start kube-proxy "${KBIN}/kube-proxy" --config "${S}/kube-proxy.yaml"
}

node_ready() {
  wait_for 90 "node ${NODE} Ready" kc wait --for=condition=Ready "node/${NODE}" --timeout=2s
  wait_for 60 "the default ServiceAccount" kc get serviceaccount default -n default
  start provisioner "${ROOT}/bin/e2e/opr8r/provisioner" -kubeconfig "${S}/provisioner.kubeconfig" \
    -root "${S}/volumes" -node "${NODE}"
  wait_for 30 "the local-path StorageClass" kc get storageclass local-path
}

# ---------------------------------------------------------------- engines
argo_up() {
  local mod; mod="$(go mod download -json "github.com/argoproj/argo-workflows/v3@v${ARGO_VERSION}" | jq -r .Dir)"
  local crds=() f
  for f in "${mod}"/manifests/base/crds/full/argoproj.io_*.yaml; do crds+=(-f "$f"); done
  kc apply --server-side --force-conflicts "${crds[@]}" >/dev/null
  local k="${S}/argo-kustomize"; rm -rf "${k}"; mkdir -p "${k}"
  cp -r "${mod}/manifests/base/workflow-controller" "${k}/workflow-controller"
  cp -r "${mod}/manifests/cluster-install-no-crds/workflow-controller-rbac" "${k}/workflow-controller-rbac"
  chmod -R u+w "${k}"
  cat >"${k}/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: argo
resources: [workflow-controller, workflow-controller-rbac]
images:
- {name: quay.io/argoproj/workflow-controller, newTag: v${ARGO_VERSION}}
patches:
- target: {kind: Deployment, name: workflow-controller}
  patch: |-
    - op: add
      path: /spec/template/spec/containers/0/env/-
      value: {name: DEFAULT_REQUEUE_TIME, value: "${ARGO_REQUEUE_TIME}"}
YAML
  kc create namespace argo --dry-run=client -o yaml | kc apply -f - >/dev/null
  "${KUSTOMIZE}" build "${k}" | kc apply --server-side --force-conflicts -f - >/dev/null
}

tekton_up() {
  local mod; mod="$(go mod download -json "github.com/tektoncd/pipeline@v${TEKTON_VERSION}" | jq -r .Dir)"
  local f files=()
  # The controller and the admission webhook (defaulting, validation and
  # CRD conversion, as on any Tekton install); not the resolvers, the
  # events controller or the webhook's autoscaler.
  for f in "${mod}"/config/100-namespace/*.yaml "${mod}"/config/*.yaml "${mod}"/config/300-crds/*.yaml; do
    case "$(basename "$f")" in webhook-hpa.yaml|events.yaml) continue;; esac
    files+=("$f")
  done
  # Tekton's default timeout of a TaskRun and a PipelineRun (60 minutes)
  # lowered to 1: TestEngines/long-apply's apply runs past it, which only
  # the deadlines opr8r gives every task (spec.timeouts) allow; a task
  # opr8r built without one would fail every Tekton scenario. It is in
  # config-defaults as applied, not patched in after: Tekton's webhook
  # validates its ConfigMaps once it has registered, and a patch sent
  # between its registration and its Service's first endpoint was refused
  # ("connection refused"), failing cluster.sh up (stop 43).
  for f in "${files[@]}"; do
    echo "---"
    case "$(basename "$f")" in
      config-defaults.yaml) sed '/^data:/a\  default-timeout-minutes: "1"' "$f" ;;
      config-feature-flags.yaml) sed "s#^\(  running-in-environment-with-injected-sidecars:\).*#\1 \"${TEKTON_INJECTED_SIDECARS}\"#" "$f" ;;
      *) cat "$f" ;;
    esac
    echo
  done \
    | sed -e "s#ko://github.com/tektoncd/pipeline/cmd/\([a-z]*\)#localhost/tekton/\1:v${TEKTON_VERSION}#g" \
          -e "s#cgr.dev/chainguard/busybox@sha256:[0-9a-f]*#${SHELL_IMAGE}#g" \
    | kc apply --server-side --force-conflicts -f - >/dev/null
}

# The namespaces whose TerraformRuns the e2e scenarios and make dev create:
# e2e (every scenario's ns), default (the stacks' edge, examples/ for make
# dev), e2e-providers (TestProviderCache: a namespace whose provider cache
# starts empty), e2e-governed (TestGovernance: runs that policies set once
# govern, labelled for a ClusterTerraformRunPolicy's namespaceSelector).
# The manager watches them only and holds its rights there, as the
# README's install line gives.
E2E_NAMESPACES="e2e,default,e2e-providers,e2e-governed"

# provider_mirror_up runs the provider network mirror in opr8r-system,
# with its certificate, and the CA the manager gives terraform steps.
provider_mirror_up() {
  kc create namespace opr8r-system --dry-run=client -o yaml | kc apply -f - >/dev/null
  kc create configmap provider-mirror-ca -n opr8r-system --from-file=ca.crt="${S}/pki/ca.crt" --dry-run=client -o yaml | kc apply -f - >/dev/null
  kc create secret tls provider-mirror-tls -n opr8r-system --cert="${S}/pki/provider-mirror.crt" --key="${S}/pki/provider-mirror.key" \
    --dry-run=client -o yaml | kc apply -f - >/dev/null
  kc apply -f - >/dev/null <<MIRROR
apiVersion: apps/v1
kind: Deployment
metadata: {name: provider-mirror, namespace: opr8r-system}
spec:
  selector: {matchLabels: {app: provider-mirror}}
  template:
    metadata: {labels: {app: provider-mirror}}
    spec:
      containers:
      - name: mirror
        image: ${MIRROR_IMAGE}
        imagePullPolicy: Never
        args: [-cert=/tls/tls.crt, -key=/tls/tls.key,
               "-provider=registry.terraform.io/hashicorp/kubernetes=${TFK_VERSION}=/providers/terraform-provider-kubernetes_v${TFK_VERSION}",
               "-provider=registry.opentofu.org/hashicorp/kubernetes=${TFK_VERSION}=/providers/terraform-provider-kubernetes_v${TFK_VERSION}"]
        ports: [{containerPort: 8443}]
        readinessProbe: {tcpSocket: {port: 8443}}
        resources: {requests: {cpu: 10m, memory: 32Mi}}
        volumeMounts: [{name: tls, mountPath: /tls, readOnly: true}]
      volumes: [{name: tls, secret: {secretName: provider-mirror-tls}}]
---
apiVersion: v1
kind: Service
metadata: {name: provider-mirror, namespace: opr8r-system}
spec:
  clusterIP: ${MIRROR_IP}
  selector: {app: provider-mirror}
  ports: [{port: 443, targetPort: 8443}]
MIRROR
}

opr8r_up() {
  kc create namespace e2e --dry-run=client -o yaml | kc apply -f - >/dev/null
  kc create namespace e2e-providers --dry-run=client -o yaml | kc apply -f - >/dev/null
  kc create namespace e2e-governed --dry-run=client -o yaml | kc apply -f - >/dev/null
  kc label namespace e2e-governed opr8r-e2e/governed=true --overwrite >/dev/null
  provider_mirror_up
  "${HELM}" --kubeconfig "${S}/admin.kubeconfig" upgrade --install opr8r "${ROOT}/deploy/opr8r" \
    --namespace opr8r-system --create-namespace \
    --set image.repository="${OPR8R_IMAGE%:*}" --set image.tag="${E2E_IMAGE_TAG}" \
    --set terraformImage="${TERRAFORM_IMAGE}" \
    --set "watchNamespaces={${E2E_NAMESPACES}}" --set "runner.namespaces={${E2E_NAMESPACES}}" \
    --set leaderElection=false --set logLevel=debug --set minCheckInterval=5s --set stateRetry=3m \
    --set allowCrossNamespaceDependencies=true --set stateAPI.clusterIP="${STATE_API_IP}" \
    --set "egress.allowCIDRs={$(node_ip)/32}" \
    --set providers.mirror.url="https://${MIRROR_IP}/" --set providers.mirror.caConfigMap=provider-mirror-ca \
    --set providers.cache.claim=opr8r-provider-cache --set providers.cache.size=1Gi >/dev/null
  # alice and bob (group e2e-approvers) may approve plans in e2e, not edit runs.
  kc create rolebinding e2e-approvers --clusterrole=opr8r-approver --group=e2e-approvers -n e2e \
    --dry-run=client -o yaml | kc apply -f - >/dev/null
  # The tenants: edit (with Argo's and Tekton's aggregated rules) and
  # opr8r-editor in their own namespace; trent approves in e2e too.
  local role
  for role in edit opr8r-editor; do
    kc create rolebinding "e2e-tenants-${role}" --clusterrole="${role}" --group=e2e-tenants -n e2e \
      --dry-run=client -o yaml | kc apply -f - >/dev/null
    kc create rolebinding "default-tenants-${role}" --clusterrole="${role}" --group=default-tenants -n default \
      --dry-run=client -o yaml | kc apply -f - >/dev/null
  done
  kc create rolebinding e2e-trent-approver --clusterrole=opr8r-approver --user=opr8r-e2e-trent -n e2e \
    --dry-run=client -o yaml | kc apply -f - >/dev/null
  # e2e-governed: the tenants edit runs and alice and bob approve, under
  # the policies TestGovernance sets once.
  for role in edit opr8r-editor; do
    kc create rolebinding "e2e-tenants-${role}" --clusterrole="${role}" --group=e2e-tenants -n e2e-governed \
      --dry-run=client -o yaml | kc apply -f - >/dev/null
  done
  kc create rolebinding e2e-approvers --clusterrole=opr8r-approver --group=e2e-approvers -n e2e-governed \
    --dry-run=client -o yaml | kc apply -f - >/dev/null
  # e2e-restricted: a namespace a runner policy restricts (TestTenants tries
  # settings outside it there, dry-run), apart from the other scenarios'.
  kc create namespace e2e-restricted --dry-run=client -o yaml | kc apply -f - >/dev/null
  for role in edit opr8r-editor; do
    kc create rolebinding "e2e-tenants-${role}" --clusterrole="${role}" --group=e2e-tenants -n e2e-restricted \
      --dry-run=client -o yaml | kc apply -f - >/dev/null
  done
  kc apply -f - >/dev/null <<'POLICY'
apiVersion: v1
kind: ConfigMap
metadata:
  name: runner-policy-e2e-restricted
  namespace: opr8r-system
  labels: {opr8r.io/runner-policy: "true"}
data:
  namespaces: e2e-restricted
  allowedImages: |
    localhost/opr8r/.*
  allowedTolerations: ""
  maxCPU: "2"
  maxMemory: 2Gi
POLICY
  # They may also resume Workflows (argo resume), which opr8r-argo-resume
  # judges against each run's spec.approval at admission.
  # (YAML, not kubectl create role: that looks the resource up, and Argo's
  # CRDs may not be served yet.)
  kc apply -f - >/dev/null <<'ROLE'
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: argo-resumer, namespace: e2e}
rules:
  - apiGroups: [argoproj.io]
    resources: [workflows]
    verbs: [get, list, watch, update, patch]
ROLE
  kc create rolebinding e2e-argo-resumers --role=argo-resumer --group=e2e-approvers -n e2e \
    --dry-run=client -o yaml | kc apply -f - >/dev/null
}

wait_deployments() {
  local ns
  for ns in argo tekton-pipelines opr8r-system; do
    wait_for 180 "deployments in ${ns}" kc wait --for=condition=Available deployment --all -n "${ns}" --timeout=2s
  done
}

up() {
  preflight
  build_all
  log "builds ready"
  build_images
  log "images ready"
  mkdir -p "${S}"
  pki
  containerd_up
  # Images load while the control plane starts; the engines are installed
  # while the node comes up. Their pods start as soon as it is Ready.
  load_images >"${S}/logs/load-images.log" 2>&1 & local loader=$!
  control_plane_up
  log "control plane up"
  wait "${loader}" || { cat "${S}/logs/load-images.log" >&2; die "loading images failed"; }
  cat "${S}/logs/load-images.log" >&2
  start_node
  local pids=() p
  argo_up >"${S}/logs/install-argo.log" 2>&1 & pids+=($!)
  tekton_up >"${S}/logs/install-tekton.log" 2>&1 & pids+=($!)
  opr8r_up >"${S}/logs/install-opr8r.log" 2>&1 & pids+=($!)
  for p in "${pids[@]}"; do
    wait "$p" || { cat "${S}"/logs/install-*.log >&2; die "installing the engines or opr8r failed"; }
  done
  argo_server_up >"${S}/logs/install-argo-server.log" 2>&1 || { cat "${S}/logs/install-argo-server.log" >&2; die "installing Argo Server failed"; }
  tekton_view_up >"${S}/logs/install-tekton-view.log" 2>&1 || { cat "${S}/logs/install-tekton-view.log" >&2; die "installing the Tekton page failed"; }
  log "engines, Argo Server, the Tekton page and opr8r installed"
  node_ready
  log "node ${NODE} Ready, default ServiceAccount present"
  wait_deployments
  log "Argo ${ARGO_VERSION}, Tekton ${TEKTON_VERSION} and opr8r are available"
  echo "export KUBECONFIG=${S}/admin.kubeconfig"
}

# ---------------------------------------------------------------- teardown
down() {
  local name pid
  # Pods first, while kubelet and the runtime still run, so their sandboxes,
  # mounts and CNI state are released by their owners.
  if [ -f "${S}/pids/kubelet" ] && kill -0 "$(cat "${S}/pids/kubelet")" 2>/dev/null; then
    kc delete namespace e2e argo tekton-pipelines opr8r-system --wait=false >/dev/null 2>&1 || true
  fi
  for name in opr8r-dev provisioner kube-proxy kubelet kube-scheduler kube-controller-manager kube-apiserver etcd; do
    [ -f "${S}/pids/${name}" ] || continue
    pid="$(cat "${S}/pids/${name}")"
    kill "${pid}" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.25; done
    kill -9 "${pid}" 2>/dev/null || true
    rm -f "${S}/pids/${name}"
  done
  if [ -S "${SOCK}" ]; then
    local ctr=("${CBIN}/ctr" --address "${SOCK}" -n k8s.io) t
    for t in $("${ctr[@]}" tasks ls -q 2>/dev/null); do "${ctr[@]}" tasks kill -s KILL "$t" >/dev/null 2>&1 || true; done
    sleep 1
    for t in $("${ctr[@]}" tasks ls -q 2>/dev/null); do "${ctr[@]}" tasks delete -f "$t" >/dev/null 2>&1 || true; done
    for t in $("${ctr[@]}" containers ls -q 2>/dev/null); do "${ctr[@]}" containers delete "$t" >/dev/null 2>&1 || true; done
  fi
  # Shims outlive containerd by design; stop the ones of our containerd.
  pkill -f "containerd-shim-runc-v2 -namespace k8s.io .*-address ${SOCK}" 2>/dev/null || true
  if [ -f "${S}/pids/containerd" ]; then
    pid="$(cat "${S}/pids/containerd")"; kill "${pid}" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.25; done
    kill -9 "${pid}" 2>/dev/null || true; rm -f "${S}/pids/containerd"
  fi
  # What is written outside $S even with every directory redirected.
  local m
  for m in $(awk -v s="${S}" '$2 ~ "^"s {print $2}' /proc/mounts | sort -r); do umount -l "$m" 2>/dev/null || true; done
  rm -rf /run/containerd/s /var/lib/cni/results /var/lib/kubelet/device-plugins /var/log/containers
  local cg
  for cg in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/unified/kubepods; do
    [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  local ipt tbl chain
  for ipt in iptables ip6tables; do
    command -v "$ipt" >/dev/null 2>&1 || continue
    for tbl in filter nat mangle; do
      "$ipt" -t "$tbl" -S 2>/dev/null | awk '/^-A/ && /(KUBE-|CNI-)/' | sed 's/^-A/-D/' | while read -r rule; do
        eval "$ipt -t $tbl $rule" 2>/dev/null || true
      done
      for chain in $("$ipt" -t "$tbl" -S 2>/dev/null | awk '/^-N (KUBE-|CNI-)/{print $2}'); do "$ipt" -t "$tbl" -F "$chain" 2>/dev/null || true; done
      for chain in $("$ipt" -t "$tbl" -S 2>/dev/null | awk '/^-N (KUBE-|CNI-)/{print $2}'); do "$ipt" -t "$tbl" -X "$chain" 2>/dev/null || true; done
    done
  done
  ip link delete cni0 2>/dev/null || true
  rm -rf "${S}"
  log "down: processes stopped, state ${S} removed"
}

status() {
  local name
  for name in etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy provisioner; do
    if [ -f "${S}/pids/${name}" ] && kill -0 "$(cat "${S}/pids/${name}")" 2>/dev/null; then echo "${name}: running"; else echo "${name}: stopped"; fi
  done
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  can-run) [ "$(id -u)" = 0 ] && grep -qw cgroup /proc/mounts && [ -n "$(node_ip)" ] ;;
  build) preflight; build_all; build_images ;;
  # Rebuild opr8r (manager, step runner, plugin), reimport its image and
  # restart the manager: the edit-test loop on a running cluster.
  reload)
    (cd "${ROOT}" && CGO_ENABLED=0 go build -trimpath -o bin/e2e/opr8r/ ./cmd/manager ./cmd/opr8r-step ./cmd/kubectl-tfrun)
    build_images
    "${CBIN}/ctr" --address "${SOCK}" -n k8s.io images import "${IMAGES}/opr8r.tar" >/dev/null 2>"${S}/logs/ctr-import.log"
    kc rollout restart deployment -n opr8r-system >/dev/null
    kc rollout status deployment -n opr8r-system --timeout=120s >&2
    log "opr8r reloaded" ;;
  # Stop kube-apiserver, keep it down for SECONDS (default 5), and start it
  # again with the same flags: the API server restart of `make chaos`.
  restart-apiserver)
    pid="$(cat "${S}/pids/kube-apiserver")"
    kill "${pid}"
    for _ in $(seq 1 120); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.25; done
    kill -9 "${pid}" 2>/dev/null || true
    log "kube-apiserver stopped; starting it again in ${2:-5}s"
    sleep "${2:-5}"
    control_plane_up
    log "kube-apiserver restarted" ;;
  # The control plane and node only, from binaries already built (debugging).
  node) preflight; mkdir -p "${S}"; pki; containerd_up; load_images; control_plane_up; start_node; node_ready; log "node up" ;;
  *) echo "usage: $0 up|down|status|build" >&2; exit 2 ;;
esac
