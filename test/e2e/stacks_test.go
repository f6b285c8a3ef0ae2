//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// The stack: a network on Argo, an app on Tekton that takes the network's
// vpc id and its (sensitive) database password, both in namespace e2e;
// and an edge on plain Jobs in namespace default that takes the vpc id
// across namespaces (the chart is installed with
// allowCrossNamespaceDependencies, and a RoleBinding lets default's runner
// read the network's outputs Secret).

const networkModule = `
variable "cidr" { type = string }
resource "terraform_data" "vpc" { input = var.cidr }
output "vpc_id" { value = "vpc-${substr(sha256(terraform_data.vpc.output), 0, 8)}" }
output "cidr" { value = terraform_data.vpc.output }
output "db_password" {
  value     = "pw-${sha256("db:${terraform_data.vpc.output}")}"
  sensitive = true
}
`

const appModule = `
variable "vpc_id" { type = string }
variable "db_password" {
  type      = string
  sensitive = true
}
resource "terraform_data" "app" { input = "app in ${var.vpc_id}" }
output "placement" { value = terraform_data.app.output }
output "password_sha256" { value = nonsensitive(sha256(var.db_password)) }
`

const edgeModule = `
variable "network_vpc" {
  type    = string
  default = "" # a destroy may plan after the network is gone
}
resource "terraform_data" "edge" { input = "edge for ${var.network_vpc}" }
output "route" { value = terraform_data.edge.output }
`

func stackRun(name, namespace, engine, module, approval, cidr, dependsOn string) string {
	files, _ := json.Marshal(map[string]string{"main.tf": module})
	vars := ""
	if cidr != "" {
		vars = fmt.Sprintf("  terraform:\n    vars: [{name: cidr, value: %q}]\n", cidr)
	}
	return fmt.Sprintf(`apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRun
metadata: {name: %s, namespace: %s}
spec:
  engine: %s
  source: {inline: {files: %s}}
%s  approval: {mode: %s}
  deletionPolicy: Destroy
  runner: {workspace: {size: 64Mi}}
%s`, name, namespace, engine, files, vars, approval, dependsOn)
}

// edgeReadsNetwork lets default's runner read the network's outputs
// Secret, and nothing else in e2e.
const edgeReadsNetwork = `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: stack-network-outputs-reader, namespace: e2e}
rules:
- {apiGroups: [""], resources: [secrets], resourceNames: [stack-network-outputs], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: stack-edge-reads-network, namespace: e2e}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: stack-network-outputs-reader}
subjects:
- {kind: ServiceAccount, name: opr8r-runner, namespace: default}
`

func (e *env) getIn(t *testing.T, namespace, name string) *infrav1.TerraformRun {
	t.Helper()
	run := &infrav1.TerraformRun{}
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: namespace, Name: name}, run); err != nil {
		t.Fatalf("get %s/%s: %v", namespace, name, err)
	}
	return run
}

// waitIn is waitFor in any namespace.
func (e *env) waitIn(t *testing.T, namespace, name, what string, timeout time.Duration, ok func(*infrav1.TerraformRun) bool) *infrav1.TerraformRun {
	t.Helper()
	start := time.Now()
	for {
		run := e.getIn(t, namespace, name)
		if ok(run) {
			t.Logf("%s/%s: %s after %s", namespace, name, what, time.Since(start).Round(time.Second))
			return run
		}
		if time.Since(start) > timeout {
			st, _ := json.MarshalIndent(run.Status, "", "  ")
			t.Fatalf("%s/%s: timed out after %s waiting for %s; status:\n%s", namespace, name, timeout, what, st)
		}
		time.Sleep(time.Second)
	}
}

func (e *env) goneIn(t *testing.T, namespace, name, what string, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		err := e.c.Get(context.Background(), types.NamespacedName{Namespace: namespace, Name: name}, &infrav1.TerraformRun{})
		if apierrors.IsNotFound(err) {
			t.Logf("%s/%s: %s after %s", namespace, name, what, time.Since(start).Round(time.Second))
			return
		}
		if time.Since(start) > timeout {
			st, _ := json.MarshalIndent(e.getIn(t, namespace, name).Status, "", "  ")
			t.Fatalf("%s/%s: still there after %s, waiting for %s; status:\n%s", namespace, name, timeout, what, st)
		}
		time.Sleep(time.Second)
	}
}

func (e *env) secretData(t *testing.T, namespace, name string) map[string]string {
	t.Helper()
	sec := &corev1.Secret{}
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: namespace, Name: name}, sec); err != nil {
		t.Fatalf("Secret %s/%s: %v", namespace, name, err)
	}
	out := map[string]string{}
	for k, v := range sec.Data {
		out[k] = string(v)
	}
	return out
}

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func condReason(run *infrav1.TerraformRun, typ string) string {
	for _, c := range run.Status.Conditions {
		if c.Type == typ {
			return string(c.Status) + "/" + c.Reason
		}
	}
	return ""
}

// appliedRun: a run other than prev of the current spec applied, Ready.
func appliedRun(prev string) func(*infrav1.TerraformRun) bool {
	return func(r *infrav1.TerraformRun) bool {
		return ready(r) && r.Status.Run != nil && r.Status.Run.ID != prev && r.Status.Run.Phase == infrav1.RunSucceeded
	}
}

// consumerSeesNetwork checks that the app's and the edge's real terraform
// took the network's real outputs, and that the sensitive one stayed out
// of everything but Secrets.
func (e *env) consumerSeesNetwork(t *testing.T) (vpc string) {
	t.Helper()
	net := e.secretData(t, ns, "stack-network-outputs")
	vpc, password := net["vpc_id"], net["db_password"]
	if !strings.HasPrefix(vpc, "vpc-") || !strings.HasPrefix(password, "pw-") {
		t.Fatalf("the network's outputs Secret = vpc_id %q, db_password of %d bytes", vpc, len(password))
	}
	app := e.secretData(t, ns, "stack-app-outputs")
	if app["placement"] != "app in "+vpc {
		t.Fatalf("the app's terraform placed itself %q, want %q (the network's vpc_id)", app["placement"], "app in "+vpc)
	}
	if app["password_sha256"] != sha256hex(password) {
		t.Fatal("the app's terraform did not get the network's db_password")
	}
	edge := e.secretData(t, "default", "stack-edge-outputs")
	if edge["route"] != "edge for "+vpc {
		t.Fatalf("the edge's terraform (another namespace, read through the API) routes %q, want %q", edge["route"], "edge for "+vpc)
	}
	e.noLeak(t, password)
	return vpc
}

// noLeak looks for a sensitive value in the dependents' status, events,
// engine objects, step pods' logs and the manager's log.
func (e *env) noLeak(t *testing.T, value string) {
	t.Helper()
	places := map[string][]string{
		"the app (status, spec)":            {"get", "tfrun", "stack-app", "-n", ns, "-o", "json"},
		"the edge (status, spec)":           {"get", "tfrun", "stack-edge", "-n", "default", "-o", "json"},
		"events in e2e":                     {"get", "events", "-n", ns, "-o", "json"},
		"events in default":                 {"get", "events", "-n", "default", "-o", "json"},
		"the app's PipelineRuns, TaskRuns":  {"get", "pipelineruns,taskruns,customruns", "-n", ns, "-l", "infra.opr8r.io/run=stack-app", "-o", "json"},
		"the edge's Jobs and pods":          {"get", "jobs,pods", "-n", "default", "-l", "infra.opr8r.io/run=stack-edge", "-o", "json"},
		"the app's step logs":               {"logs", "-n", ns, "-l", "infra.opr8r.io/run=stack-app", "--all-containers", "--tail=-1", "--max-log-requests=200"},
		"the edge's step logs":              {"logs", "-n", "default", "-l", "infra.opr8r.io/run=stack-edge", "--all-containers", "--tail=-1", "--max-log-requests=200"},
		"the manager's log":                 {"logs", "-n", "opr8r-system", "-l", "app.kubernetes.io/name=opr8r", "--all-containers", "--tail=-1"},
		"the network's status (digest too)": {"get", "tfrun", "stack-network", "-n", ns, "-o", "jsonpath={.status}"},
	}
	for where, args := range places {
		// A pod that went away between kubectl's list and its log request
		// (Tekton deletes a PipelineRun's affinity-assistant pod when it
		// completes) fails the whole command with NotFound: scan again.
		var out []byte
		var err error
		for attempt := 1; ; attempt++ {
			out, err = exec.Command(e.kubectl, append([]string{"--kubeconfig", e.kubeconfig}, args...)...).CombinedOutput()
			if err == nil || attempt == 5 || !strings.Contains(string(out), "(NotFound)") {
				break
			}
			t.Logf("kubectl %s: a pod went away while it read (%v); again", strings.Join(args, " "), err)
			time.Sleep(2 * time.Second)
		}
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if len(out) < 20 {
			t.Fatalf("kubectl %s printed almost nothing, so the scan proves nothing: %q", strings.Join(args, " "), out)
		}
		if strings.Contains(string(out), value) {
			t.Fatalf("the network's sensitive db_password is in %s", where)
		}
	}
	t.Logf("the network's sensitive output is in none of %d places scanned", len(places))
}

// TestStacks: a two-layer stack, producer on Argo and consumer on Tekton,
// the consumer's real terraform reading the producer's real outputs; a
// third run on plain Jobs in another namespace reading them through the
// API; then a producer change flowing through each dependent's own gate;
// then deletion in reverse order.
func TestStacks(t *testing.T) {
	// The scenario tests run side by side (make e2e runs the faults of
	// TestChaos apart, after them).
	t.Parallel()
	e := setup(t)
	e.sh(t, edgeReadsNetwork, e.kubectl, "apply", "-f", "-")
	t.Cleanup(func() {
		for _, r := range []struct{ ns, name string }{{ns, "stack-app"}, {"default", "stack-edge"}, {ns, "stack-network"}} {
			_ = e.c.Delete(context.Background(), &infrav1.TerraformRun{ObjectMeta: objMetaIn(r.ns, r.name)})
		}
	})
	appDeps := "  dependsOn:\n  - name: stack-network\n    outputs: {select: [{output: vpc_id}, {output: db_password}]}\n"
	edgeDeps := "  dependsOn:\n  - {name: stack-network, namespace: e2e, outputs: {select: [{output: vpc_id, as: network_vpc}]}}\n"
	// A dependency in another namespace needs its target's consent.
	networkConsent := "  allowDependentsFrom: [default]\n"

	// 1. All three at once: only the network starts; the others wait for it.
	e.sh(t, stackRun("stack-app", ns, "tekton", appModule, "Manual", "", appDeps), e.kubectl, "apply", "-f", "-")
	e.sh(t, stackRun("stack-edge", "default", "job", edgeModule, "Auto", "", edgeDeps), e.kubectl, "apply", "-f", "-")
	e.sh(t, stackRun("stack-network", ns, "argo", networkModule, "Manual", "10.0.0.0/16", networkConsent), e.kubectl, "apply", "-f", "-")
	e.waitIn(t, ns, "stack-app", "waiting for its dependency", time.Minute, func(r *infrav1.TerraformRun) bool {
		return condReason(r, infrav1.ReconcilingCondition) == "True/DependencyNotReady" && r.Status.Run == nil
	})
	e.waitIn(t, "default", "stack-edge", "waiting for its dependency in e2e", time.Minute, func(r *infrav1.TerraformRun) bool {
		return condReason(r, infrav1.ReconcilingCondition) == "True/DependencyNotReady" && r.Status.Run == nil
	})
	run := e.waitFor(t, "stack-network", "a plan awaiting approval", 5*time.Minute, awaiting(""))
	e.sh(t, "", e.tfrun, "graph", "-n", ns)
	e.sh(t, "", e.tfrun, "approve", "stack-network", "-n", ns)
	net1 := e.waitFor(t, "stack-network", "applied", 5*time.Minute, appliedRun("")).Status.Run.ID

	// 2. The dependents start: the app through its own gate, the edge at once.
	run = e.waitFor(t, "stack-app", "its plan awaiting approval", 5*time.Minute, awaiting(""))
	e.sh(t, "", e.tfrun, "approve", "stack-app", "-n", ns)
	app1 := e.waitFor(t, "stack-app", "applied", 5*time.Minute, appliedRun("")).Status.Run.ID
	edge1 := e.waitIn(t, "default", "stack-edge", "applied", 5*time.Minute, appliedRun("")).Status.Run.ID
	vpc1 := e.consumerSeesNetwork(t)
	e.sh(t, "", e.tfrun, "graph", "-n", ns)
	e.sh(t, "", e.tfrun, "graph", "-n", "default")

	// 3. The network changes (a new cidr: a new vpc_id and password); it is
	// approved; the change flows to both dependents, recorded as theirs.
	e.sh(t, stackRun("stack-network", ns, "argo", networkModule, "Manual", "10.1.0.0/16", networkConsent), e.kubectl, "apply", "-f", "-")
	e.waitFor(t, "stack-network", "the change's plan awaiting approval", 5*time.Minute, awaiting(net1))
	e.sh(t, "", e.tfrun, "approve", "stack-network", "-n", ns)
	net2 := e.waitFor(t, "stack-network", "the change applied", 5*time.Minute, appliedRun(net1)).Status.Run.ID
	run = e.waitFor(t, "stack-app", "re-planned for the new outputs, awaiting approval", 5*time.Minute, awaiting(app1))
	want := fmt.Sprintf("dependency stack-network: run %s changed its outputs", net2)
	if run.Status.Run.Trigger != infrav1.TriggerDependencyChange || run.Status.Run.TriggerDetail != want {
		t.Fatalf("the app's run %s started by %s %q, want DependencyChange %q", run.Status.Run.ID, run.Status.Run.Trigger, run.Status.Run.TriggerDetail, want)
	}
	e.sh(t, "", e.tfrun, "graph", "-n", ns)
	e.sh(t, "", e.tfrun, "approve", "stack-app", "-n", ns)
	e.waitFor(t, "stack-app", "the new outputs applied", 5*time.Minute, appliedRun(app1))
	edge := e.waitIn(t, "default", "stack-edge", "the new outputs applied", 5*time.Minute, appliedRun(edge1))
	if edge.Status.Run.Trigger != infrav1.TriggerDependencyChange || !strings.Contains(edge.Status.Run.TriggerDetail, net2) {
		t.Fatalf("the edge's run started by %s %q, want DependencyChange naming %s", edge.Status.Run.Trigger, edge.Status.Run.TriggerDetail, net2)
	}
	if vpc2 := e.consumerSeesNetwork(t); vpc2 == vpc1 {
		t.Fatalf("the vpc id did not change (%s)", vpc2)
	}
	out := e.sh(t, "", e.tfrun, "history", "stack-app", "-n", ns)
	if !strings.Contains(out, "DependencyChange") {
		t.Fatalf("kubectl tfrun history does not show the DependencyChange run:\n%s", out)
	}
	e.sh(t, "", e.tfrun, "graph", "-n", ns)
	e.sh(t, "", e.tfrun, "graph", "-n", ns, "-o", "dot")

	// 4. A rerun of the network that changes no output starts nothing below.
	app2 := e.get(t, "stack-app").Status.Run.ID
	e.sh(t, "", e.tfrun, "rerun", "stack-network", "-n", ns)
	e.waitFor(t, "stack-network", "the rerun finished without changes", 5*time.Minute, func(r *infrav1.TerraformRun) bool {
		return appliedRun(net2)(r) && r.Status.Plan != nil && !r.Status.Plan.HasChanges
	})
	time.Sleep(15 * time.Second)
	if id := e.get(t, "stack-app").Status.Run.ID; id != app2 {
		t.Fatalf("a no-change apply of the network started run %s of the app", id)
	}

	// 5. Delete all three at once: the dependents in the namespace destroy
	// first, the network waits for them (DependentsExist); one in another
	// namespace never holds a destroy back. The Manual runs' destroys wait
	// for approval of their plans like applies; the edge's (Auto) does not.
	for _, r := range []struct{ ns, name string }{{ns, "stack-network"}, {ns, "stack-app"}, {"default", "stack-edge"}} {
		e.sh(t, "", e.kubectl, "delete", "tfrun", r.name, "-n", r.ns, "--wait=false")
	}
	e.waitFor(t, "stack-network", "waiting for its dependents before destroying", 2*time.Minute, func(r *infrav1.TerraformRun) bool {
		c := condOf(r, infrav1.ReconcilingCondition)
		return strings.Contains(c, "(DependentsExist)") && strings.Contains(c, "stack-app") && r.Status.Run.Type == infrav1.RunApply
	})
	e.goneIn(t, "default", "stack-edge", "destroyed and gone", 5*time.Minute)
	e.waitFor(t, "stack-app", "its destroy's plan awaiting approval", 5*time.Minute, func(r *infrav1.TerraformRun) bool {
		return r.Status.Run != nil && r.Status.Run.Type == infrav1.RunDestroy && r.Status.Run.Phase == infrav1.RunAwaitingApproval && r.Status.Plan != nil && r.Status.Plan.Destroy > 0
	})
	e.sh(t, "", e.tfrun, "approve", "stack-app", "-n", ns)
	e.goneIn(t, ns, "stack-app", "destroyed and gone", 5*time.Minute)
	e.waitFor(t, "stack-network", "its destroy's plan awaiting approval", 5*time.Minute, func(r *infrav1.TerraformRun) bool {
		return r.Status.Run != nil && r.Status.Run.Type == infrav1.RunDestroy && r.Status.Run.Phase == infrav1.RunAwaitingApproval
	})
	e.sh(t, "", e.tfrun, "approve", "stack-network", "-n", ns)
	e.goneIn(t, ns, "stack-network", "destroyed after its dependents and gone", 5*time.Minute)
	if _, resources := e.state(t, "stack-network"); resources != 0 {
		t.Fatalf("the network's state holds %d resources after its destroy", resources)
	}
}

func objMetaIn(namespace, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: namespace, Name: name}
}
