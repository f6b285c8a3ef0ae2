#!/usr/bin/env bash
# make e2e: bring the from-source cluster up, run the e2e scenarios on both
# engines, dump diagnostics on failure, and tear the cluster down
# (E2E_KEEP=1 leaves it running; `make e2e-down` removes it). E2E_RUN=regex
# runs only the matching tests (go test -run).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
S="${E2E_STATE:-/var/lib/opr8r-e2e}"
KUBE_VERSION="${KUBE_VERSION:-1.36.3}"
ARGO_VERSION="$(awk '$1=="github.com/argoproj/argo-workflows/v3"{print substr($2,2)}' "${ROOT}/go.mod")"
CACHE="${OPR8R_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/opr8r}"
t0=$(date +%s)
# One e2e cluster per machine: a second `make e2e` or `make dev` (another
# clone or worktree) waits here until the first has finished.
exec 9>"${E2E_LOCK:-/var/lock/opr8r-e2e.lock}"
if ! flock -n 9; then echo "e2e: another e2e run holds the cluster; waiting for it..." >&2; flock 9; fi
phase() { echo "== e2e [$(( $(date +%s) - t0 ))s] $*"; }

diagnose() {
  local k=("${CACHE}/e2e/kube-${KUBE_VERSION}/kubectl" --kubeconfig "${S}/admin.kubeconfig")
  echo "---- diagnostics"
  "${k[@]}" get nodes,pods,pvc -A -o wide 2>&1 || true
  "${k[@]}" get terraformruns,workflows,pipelineruns,taskruns,customruns -A 2>&1 || true
  "${k[@]}" get events -A --sort-by=.lastTimestamp 2>&1 | tail -40 || true
  local ns
  for ns in opr8r-system argo tekton-pipelines; do "${k[@]}" logs -n "$ns" --all-containers --tail=40 -l app.kubernetes.io/name 2>&1 | tail -60 || true; done
  "${k[@]}" logs -n argo deploy/workflow-controller --tail=40 2>&1 || true
  for f in "${S}"/logs/*.log; do echo "---- $f"; tail -n 15 "$f"; done
}

cleanup() {
  rc=$?
  if [ "${rc}" != 0 ] && [ -f "${S}/admin.kubeconfig" ]; then diagnose || true; fi
  if [ "${E2E_KEEP:-0}" != 1 ]; then
    phase "tearing the cluster down"
    "${ROOT}/test/e2e/cluster.sh" down || true
  else
    echo "E2E_KEEP=1: the cluster is still up; KUBECONFIG=${S}/admin.kubeconfig; make e2e-down removes it"
  fi
  phase "done (exit ${rc})"
  exit "${rc}"
}
trap cleanup EXIT

phase "cluster up (test/e2e/cluster.sh up)"
"${ROOT}/test/e2e/cluster.sh" up
phase "cluster ready; running the e2e scenarios on Argo, Tekton and plain Jobs"
cd "${ROOT}"
OPR8R_E2E_KUBECONFIG="${S}/admin.kubeconfig" \
OPR8R_E2E_KUBECTL="${CACHE}/e2e/kube-${KUBE_VERSION}/kubectl" \
OPR8R_E2E_TFRUN="${ROOT}/bin/e2e/opr8r/kubectl-tfrun" \
OPR8R_E2E_ARGO="${CACHE}/e2e/argo-${ARGO_VERSION}/argo" \
OPR8R_E2E_ARGO_UI="http://127.0.0.1:${ARGO_UI_PORT:-32746}" OPR8R_E2E_SCREENSHOTS="${ROOT}/bin/e2e/screenshots" \
OPR8R_E2E_CONFTEST_IMAGE="localhost/opr8r/conftest:v${CONFTEST_VERSION:-0.56.0}" \
OPR8R_E2E_CHAOS="${OPR8R_E2E_CHAOS:-}" OPR8R_E2E_CHAOS_TABLE="${ROOT}/bin/e2e/chaos-table.md" \
  go test -tags e2e -count=1 -timeout 45m -v -run "${E2E_RUN:-${OPR8R_E2E_CHAOS:+^TestChaos\$}}" ./test/e2e/ 2>&1 | tee "${ROOT}/bin/e2e/last-run.log" \
  | grep -E '^\s*(--- |PASS|FAIL|ok|panic)|e2e_test.go:[0-9]+: [a-z-]+: .* after ' || true
grep -q '^ok ' "${ROOT}/bin/e2e/last-run.log" || { tail -n 80 "${ROOT}/bin/e2e/last-run.log"; exit 1; }
phase "e2e scenarios passed"
