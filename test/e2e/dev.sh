#!/usr/bin/env bash
# make dev on a machine that can run containers: the from-source cluster
# (test/e2e/cluster.sh) with real Argo, Tekton and opr8r, then a real
# TerraformRun from examples/ planned, approved with `kubectl tfrun approve`,
# applied, and its outputs shown. The cluster stays up for you to explore
# (the Argo and Tekton objects, `kubectl tfrun ...`); `make e2e-down` removes it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
S="${E2E_STATE:-/var/lib/opr8r-e2e}"
KUBE_VERSION="${KUBE_VERSION:-1.36.3}"
EXAMPLE="${DEV_EXAMPLE:-${ROOT}/examples/inline.yaml}"
export KUBECONFIG="${S}/admin.kubeconfig"
# One e2e cluster per machine: a second `make e2e` or `make dev` (another
# clone or worktree) waits here until the first has finished. The lock sits
# next to the cluster's state (/var/lib), not in /run, so that every process
# that can see the state also sees the lock.
exec 9>"${E2E_LOCK:-/var/lib/opr8r-e2e.lock}"
if ! flock -n 9; then echo "e2e: another e2e run holds the cluster; waiting for it..." >&2; flock 9; fi
CACHE="${OPR8R_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/opr8r}"
K="${CACHE}/e2e/kube-${KUBE_VERSION}/kubectl"
TFRUN="${ROOT}/bin/e2e/opr8r/kubectl-tfrun"

"${ROOT}/test/e2e/cluster.sh" up >/dev/null
name="$("${K}" create --dry-run=client -o jsonpath='{.metadata.name}' -f "${EXAMPLE}")"
ns="$("${K}" create --dry-run=client -o jsonpath='{.metadata.namespace}' -f "${EXAMPLE}")"; ns="${ns:-default}"
echo "==> kubectl apply -f ${EXAMPLE#"${ROOT}"/}"
"${K}" apply -f "${EXAMPLE}"

wait_phase() { # wait_phase PHASE...: until status.phase is one of them
  local deadline=$(( $(date +%s) + 300 )) p
  while :; do
    p="$("${K}" get terraformrun "${name}" -n "${ns}" -o jsonpath='{.status.phase}' 2>/dev/null || true)"
    for want in "$@"; do [ "${p}" = "${want}" ] && return 0; done
    case "${p}" in Failed|Rejected) "${K}" get terraformrun "${name}" -n "${ns}" -o yaml >&2; echo "run ${p}" >&2; return 1;; esac
    [ "$(date +%s)" -lt "${deadline}" ] || { echo "timed out waiting for ${*} (phase ${p:-none})" >&2; return 1; }
    sleep 2
  done
}

echo "==> waiting for the real plan (clone, init and plan run as pods)"
wait_phase AwaitingApproval Succeeded
"${TFRUN}" list -n "${ns}"
echo "==> kubectl tfrun plan ${name}"
"${TFRUN}" plan "${name}" -n "${ns}" | tail -n 25
if [ "$("${K}" get terraformrun "${name}" -n "${ns}" -o jsonpath='{.status.phase}')" = AwaitingApproval ]; then
  echo "==> kubectl tfrun approve ${name}"
  "${TFRUN}" approve "${name}" -n "${ns}"
  wait_phase Succeeded
fi
"${TFRUN}" list -n "${ns}"
echo "==> kubectl tfrun outputs ${name}"
"${TFRUN}" outputs "${name}" -n "${ns}"
engine_kind="$("${K}" get terraformrun "${name}" -n "${ns}" -o jsonpath='{.status.run.child.kind}')"
child="$("${K}" get terraformrun "${name}" -n "${ns}" -o jsonpath='{.status.run.child.name}')"
# shellcheck source=test/e2e/dashboards.sh
. "${ROOT}/test/e2e/dashboards.sh"
ui="$(argo_ui_url)"
curl -fsS -o /dev/null "${ui}/" || echo "warning: the Argo UI does not answer at ${ui}" >&2
argo_link="${ui}/workflows?label=infra.opr8r.io/run%3D${name}"
[ "${engine_kind}" = Workflow ] && argo_link="${ui}/workflows/${ns}/${child}"
tekton_ui="$(tekton_view_url)"
curl -fsS -o /dev/null "${tekton_ui}/healthz" || echo "warning: the Tekton page does not answer at ${tekton_ui}" >&2
tekton_link="${tekton_ui}/#/namespaces/${ns}/pipelineruns?labelSelector=infra.opr8r.io%2Frun%3D${name}"
[ "${engine_kind}" = PipelineRun ] && tekton_link="${tekton_ui}/#/namespaces/${ns}/pipelineruns/${child}"
cat <<MSG

Dashboards:
  Argo UI         ${ui}   (this run: ${argo_link})
                  no login needed (server mode); to act as a person (client
                  mode: opr8r records who resumed), paste on ${ui}/login:
                  Bearer \$(kubectl create token argo-ui -n e2e)
  Tekton          ${tekton_ui}   (this run: ${tekton_link})
                  the Tekton Dashboard's own components, read-only (the
                  dashboard application cannot be built here: docs/dashboards.md);
                  runs waiting for approval: ${tekton_ui}/#/pipelineruns?labelSelector=infra.opr8r.io%2Fapproval%3Dwaiting
MSG
cat <<MSG

The cluster is still running (built from source, state in ${S}):
  export KUBECONFIG=${KUBECONFIG}
  export PATH=${ROOT}/bin/e2e/opr8r:${CACHE}/e2e/kube-${KUBE_VERSION}:\$PATH
  kubectl get terraformruns -A; kubectl get ${engine_kind,,}s -n ${ns}
  kubectl tfrun list -A        # approve, reject, rerun, logs --step plan, outputs
  make e2e-down                # stop it and remove every trace
MSG
