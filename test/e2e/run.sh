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
# clone or worktree) waits here until the first has finished. The lock sits
# next to the cluster's state (/var/lib), not in /run, so that every process
# that can see the state also sees the lock.
exec 9>"${E2E_LOCK:-/var/lib/opr8r-e2e.lock}"
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
  if [ "${rc}" != 0 ] && [ -s "${ROOT}/bin/e2e/failures.txt" ]; then cat "${ROOT}/bin/e2e/failures.txt"; fi
  phase "done (exit ${rc})"
  exit "${rc}"
}
trap cleanup EXIT

mkdir -p "${ROOT}/bin/e2e"; rm -f "${ROOT}/bin/e2e/failures.txt"
phase "cluster up (test/e2e/cluster.sh up)"
"${ROOT}/test/e2e/cluster.sh" up
cd "${ROOT}"
export OPR8R_E2E_KUBECONFIG="${S}/admin.kubeconfig" \
  OPR8R_E2E_KUBECTL="${CACHE}/e2e/kube-${KUBE_VERSION}/kubectl" \
  OPR8R_E2E_TFRUN="${ROOT}/bin/e2e/opr8r/kubectl-tfrun" \
  OPR8R_E2E_ARGO="${CACHE}/e2e/argo-${ARGO_VERSION}/argo" \
  OPR8R_E2E_CONFTEST_IMAGE="localhost/opr8r/conftest:v${CONFTEST_VERSION:-0.56.0}" \
  OPR8R_E2E_REGISTRY_IMAGE="localhost/opr8r/registry:v$(awk '$1=="github.com/google/go-containerregistry"{print substr($2,2)}' "${ROOT}/go.mod")" \
  OPR8R_E2E_CLUSTER="${ROOT}/test/e2e/cluster.sh" \
  OPR8R_E2E_GITEA="${CACHE}/e2e/gitea-${GITEA_VERSION:-1.25.4}" \
  OPR8R_E2E_ARGO_UI="http://127.0.0.1:${ARGO_UI_PORT:-32746}" \
  OPR8R_E2E_TEKTON_VIEW="http://127.0.0.1:${TEKTON_VIEW_PORT:-32097}" OPR8R_E2E_SCREENSHOTS="${ROOT}/bin/e2e/screenshots" \
  OPR8R_E2E_CHAOS_TABLE="${ROOT}/bin/e2e/chaos-table.md" \
  OPR8R_E2E_ATTACK_TABLE="${ROOT}/bin/e2e/attack-table.md"

# How many scenarios run at once (go test -parallel). All of them at once
# (there are about 30) kept the 2-core node at 100% CPU and stretched every
# wait three to four times, past the scenarios' timeouts (a lifecycle that
# takes 6 minutes alone took 20). At that saturation fewer at once costs
# the suite no time, since the work is the same, and each wait stays
# within a small multiple of its time alone. docs/e2e.md has the figures.
E2E_PARALLEL="${E2E_PARALLEL:-6}"

# scenarios LOG ARGS...: go test the e2e package with ARGS, the whole output
# in bin/e2e/LOG, the test lines and the timings on the terminal, and under
# each failed test's "--- FAIL" line the messages that say why
# (test/e2e/failures.awk); on failure, failures.txt holds them again for
# cleanup to print last.
scenarios() {
  local log="${ROOT}/bin/e2e/$1"; shift
  go test -tags e2e -count=1 -timeout 45m -parallel "${E2E_PARALLEL}" -v "$@" ./test/e2e/ 2>&1 | tee "${log}" \
    | awk -v SRC="${ROOT}/test/e2e" -v MODE=stream -v KEEP='^[ \t]*(--- |PASS|FAIL|ok|panic)|_test[.]go:[0-9]+: [a-z-]+: .* after |fault table|^[ \t]*[|]' \
      -f "${ROOT}/test/e2e/failures.awk" || true
  grep -q '^ok ' "${log}" || {
    tail -n 40 "${log}"
    awk -v SRC="${ROOT}/test/e2e" -v MODE=summary -f "${ROOT}/test/e2e/failures.awk" "${log}" > "${ROOT}/bin/e2e/failures.txt"
    exit 1
  }
}

# E2E_RUN focuses on some tests; otherwise the engine scenarios run first
# and the faults of TestChaos (make chaos) after them, on the same cluster:
# they restart the manager, the engines and the API server under the runs.
if [ -n "${E2E_RUN:-}" ]; then
  phase "cluster ready; running the e2e tests matching ${E2E_RUN}"
  scenarios last-run.log -run "${E2E_RUN}"
else
  if [ "${E2E_SCENARIOS:-all}" != chaos ]; then
    phase "cluster ready; running the e2e scenarios on Argo, Tekton and plain Jobs"
    scenarios last-run.log -skip '^TestChaos$'
    phase "e2e scenarios passed"
  fi
  if [ "${E2E_SCENARIOS:-all}" != main ]; then
    phase "faults on the real cluster (TestChaos): pods, manager, engine controllers and API server"
    scenarios chaos-run.log -run '^TestChaos$'
    phase "fault scenarios passed; table in bin/e2e/chaos-table.md"
  fi
fi
