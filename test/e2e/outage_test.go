//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/engines"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/records"
)

// backendOutage: the state backend is away at the end of a real apply for
// longer than the apply keeps saving the state (the e2e manager's
// --state-retry is 3m, cluster.sh: three times the minute the API server takes
// to come back in TestChaos, whose applies must save their state). The backend is the kubernetes one; its
// outage is an admission policy that refuses every write of the run's state
// Secret. The apply keeps the state terraform could not save as the run's
// kept state (a record of kind errored.tfstate, in Secrets <child>-rec-…)
// and fails, saying so; a tenant with edit cannot rewrite, relabel or
// plant such a Secret; once the backend is back, the rerun begins with
// restore-state, which pushes the kept state as the runner before it
// plans, so the plan sees the resource the first apply made (no changes)
// and the kept state is gone.
func backendOutage(t *testing.T, e *env, engine string) {
	name := "outage-" + engine
	policy := "e2e-outage-" + engine
	stateSecret := "tfstate-default-" + names.StateSecretSuffix(name)
	e.absent(t, name)
	// A state left by an earlier run of the scenario on a kept cluster
	// (deletionPolicy Retain) would leave the first apply nothing to do.
	e.sh(t, "", e.kubectl, "delete", "secret", stateSecret, "-n", ns, "--ignore-not-found")
	t.Cleanup(func() {
		_ = e.c.Delete(context.Background(), &infrav1.TerraformRun{ObjectMeta: objMeta(name)})
		e.sh(t, "", e.kubectl, "delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", policy, "--ignore-not-found")
	})
	// A state over 1 MiB (4,000 SHA-512s, in and out, about 0.6 MiB gzipped):
	// kept in more than one Secret, and pushed back whole.
	files, _ := json.Marshal(map[string]string{"main.tf": slowModule(40) + bulkResource})
	e.sh(t, fmt.Sprintf(`apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRun
metadata: {name: %s, namespace: %s}
spec:
  engine: %s
  source: {inline: {files: %s}}
  terraform:
    vars: [{name: v, value: "kept"}]
  approval: {mode: Auto}
  deletionPolicy: Retain
  runner: {workspace: {size: 64Mi}}
`, name, ns, engine, files), e.kubectl, "apply", "-f", "-")
	e.waitFor(t, name, "apply running", 8*time.Minute, func(r *infrav1.TerraformRun) bool { return stepOf(r, names.StepApply) == infrav1.StepRunning })

	// The backend goes away while terraform runs the provisioner.
	e.sh(t, fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: %[1]s}
spec:
  failurePolicy: Fail
  matchConstraints:
    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %[2]s}}
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [secrets]}
  validations:
    - expression: "object.metadata.name != '%[3]s'"
      message: "e2e: the state backend is away"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: %[1]s}
spec:
  policyName: %[1]s
  validationActions: [Deny]
`, policy, ns, stateSecret), e.kubectl, "apply", "-f", "-")
	began := time.Now()

	failed := e.waitFor(t, name, "the apply failed", 10*time.Minute, func(r *infrav1.TerraformRun) bool { return runPhase(r) == infrav1.RunFailed })
	if stepOf(failed, names.StepApply) != infrav1.StepFailed {
		t.Fatalf("the run failed, but not at its apply: %+v", failed.Status.Run.Steps)
	}
	if since := time.Since(began); since < 3*time.Minute {
		t.Fatalf("the apply failed %s after the backend went away, before its 3m of retries: it did not retry", since.Round(time.Second))
	}
	e.logsHintWorks(t, engine, failed)
	child := failed.Status.Run.Child.Name
	where := "the state is kept in the Secrets " + ns + "/" + child + "-rec-"
	if !strings.Contains(failed.Status.Run.Message, "kept in the Secrets") && !e.stepLogContains(t, name, names.StepApply, where) {
		t.Fatalf("neither the run's message nor the apply's log says where the state is kept (%s…): %q", where, failed.Status.Run.Message)
	}
	keptSel := records.RunIDLabel + "=" + child + "," + records.KindLabel + "=" + string(records.KindErroredState)
	keptSecrets := func() []corev1.Secret {
		list := &corev1.SecretList{}
		if err := e.c.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{records.RunIDLabel: child, records.KindLabel: string(records.KindErroredState)}); err != nil {
			t.Fatal(err)
		}
		return list.Items
	}
	secs := keptSecrets()
	if len(secs) == 0 {
		t.Fatalf("no Secret of the kept state (%s)", keptSel)
	}
	kept := secs[0].Name
	if secs[0].Labels[infrav1.RunNameLabel] != name {
		t.Fatalf("Secret %s is labelled %v, want %s=%s", kept, secs[0].Labels, infrav1.RunNameLabel, name)
	}
	var st struct{ Resources []json.RawMessage }
	// Read quietly: the state is over a MiB.
	cmd := exec.Command(e.tfrun, "kept-state", name, "-n", ns)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	keptOut, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl tfrun kept-state %s: %v", name, err)
	}
	keptJSON := string(keptOut)
	if err := json.Unmarshal([]byte(keptJSON), &st); err != nil || len(st.Resources) != 2 {
		t.Fatalf("the kept state does not hold the resources just made (%d resources, %v)", len(st.Resources), err)
	}
	if len(keptJSON) < 1<<20 || len(secs) < 2 {
		t.Fatalf("the kept state is %d bytes in %d Secrets, want over 1 MiB in more than one", len(keptJSON), len(secs))
	}
	t.Logf("%s: a state of %d bytes kept in %d Secrets", name, len(keptJSON), len(secs))
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: stateSecret}, &corev1.Secret{}); err == nil {
		if _, n := e.state(t, name); n != 0 {
			t.Fatalf("the backend holds %d resources: it was not away", n)
		}
	} else if !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}

	// A tenant who may edit the namespace may not touch a kept state.
	for _, args := range [][]string{
		{"label", "secret", kept, records.RunIDLabel + "=someone-else", "--overwrite"},
		{"patch", "secret", kept, "--type=merge", "-p", `{"data":{"chunk":"e30="}}`},
	} {
		out, err := e.shAsErr(mallory, e.kubectl, append(args, "-n", ns)...)
		// Refused by the guard of the child's objects while its run is
		// active, by the kept-state rule after: either way by
		// opr8r-guard-writes.
		if err == nil || !strings.Contains(out, "opr8r-guard-writes") {
			t.Fatalf("(as %s) kubectl %s: want a refusal by opr8r-guard-writes, got %v: %s", mallory, strings.Join(args, " "), err, out)
		}
		t.Logf("(as %s) kubectl %s: refused: %s", mallory, strings.Join(args[:2], " "), strings.TrimSpace(out))
	}
	planted := "planted-" + engine
	e.shAs(t, mallory, e.kubectl, "create", "secret", "generic", planted, "--from-literal=errored.tfstate={}", "-n", ns)
	out, err := e.shAsErr(mallory, e.kubectl, "label", "secret", planted, records.KindLabel+"="+string(records.KindErroredState),
		infrav1.RunNameLabel+"="+name, records.RunIDLabel+"="+child, "-n", ns)
	if err == nil || !strings.Contains(out, "record-kind=errored.tfstate") {
		t.Fatalf("(as %s) a Secret labelled as %s's kept state was admitted: %v %s", mallory, name, err, out)
	}
	e.sh(t, "", e.kubectl, "delete", "secret", planted, "-n", ns)

	// The backend is back; the rerun pushes the kept state first.
	e.sh(t, "", e.kubectl, "delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", policy)
	time.Sleep(3 * time.Second) // the API server drops the policy
	e.sh(t, "", e.tfrun, "rerun", name, "-n", ns)
	run := e.waitFor(t, name, "the rerun is Ready", 8*time.Minute, func(r *infrav1.TerraformRun) bool {
		return ready(r) && r.Status.Run != nil && r.Status.Run.Child.Name != failed.Status.Run.Child.Name
	})
	// No resource to make, change or destroy: the state the first apply
	// made is back. (With the 1.4 MiB state the rerun's plan once
	// reported has-changes at +0 ~0 -0, an output-only difference whose
	// cause this test does not pin down: see the issue 49 note.)
	if p := run.Status.Plan; p == nil || p.RunID != run.Status.Run.ID || p.Add != 0 || p.Change != 0 || p.Destroy != 0 || p.Replace != 0 {
		t.Fatalf("the rerun's plan %+v changes resources: the state the first apply made was lost", run.Status.Plan)
	}
	t.Logf("%s: the rerun's plan %s, has changes %v", name, run.Status.Plan.Summary, run.Status.Plan.HasChanges)
	if _, n := e.state(t, name); n != 2 {
		t.Fatalf("the backend holds %d resources after the rerun, want 2", n)
	}
	if phase := stepOf(run, names.StepRestoreState); phase != infrav1.StepSucceeded {
		t.Fatalf("the rerun's restore-state is %q, want Succeeded: %+v", phase, run.Status.Run.Steps)
	}
	if left := keptSecrets(); len(left) != 0 {
		t.Fatalf("%d Secrets of the kept state are still there after its state was pushed", len(left))
	}
	t.Logf("%s: the state kept through the outage was pushed by the rerun's restore-state, whose plan is %s", name, run.Status.Plan.Summary)
}

// bulkResource makes a state of over 1 MiB.
const bulkResource = `
resource "terraform_data" "bulk" {
  # range() makes at most 1,024 values: 4 × 1,000 (input and output:
  # about 1.4 MiB of state, 0.6 MiB gzipped, which the kubernetes backend
  # takes).
  input = flatten([for i in range(4) : [for j in range(1000) : sha512("${i}-${j}")]])
}
`

// logsHintWorks runs the command kubectl tfrun prints for a run's logs, when
// the engine's is a kubectl command, on a run whose apply failed: on the
// Job engine apply's pod never started the export-outputs and cleanup it
// carries, and the command must still print apply's log.
func (e *env) logsHintWorks(t *testing.T, engineName string, run *infrav1.TerraformRun) {
	t.Helper()
	reg, err := engine.NewRegistry(engines.All()...)
	if err != nil {
		t.Fatal(err)
	}
	eng, _ := reg.Get(infrav1.EngineName(engineName))
	loc, ok := eng.(engine.LogLocator)
	if !ok {
		t.Fatalf("engine %s locates no logs", engineName)
	}
	args := strings.Fields(loc.LogsHint(ns, run.Status.Run.Child.Name))
	if args[0] != "kubectl" {
		return // argo logs, tkn: not installed here
	}
	out := e.sh(t, "", e.kubectl, args[1:]...)
	if !strings.Contains(out, "/"+names.StepApply+"] ") {
		t.Fatalf("%s printed no line of the apply container:\n%s", strings.Join(args, " "), out)
	}
}
