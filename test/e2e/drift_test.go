//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// A module that manages a real ConfigMap through the real
// terraform-provider-kubernetes (built from source, installed from the
// cluster's provider mirror into the namespace's cache), with the pod's
// service account.
func driftModule(name, color string) string {
	return fmt.Sprintf(`terraform {
  required_providers {
    kubernetes = { source = "hashicorp/kubernetes", version = "1.13.4" }
  }
}
provider "kubernetes" {
  load_config_file = false
}
resource "kubernetes_config_map" "managed" {
  metadata {
    name      = "%s-managed"
    namespace = "%s"
  }
  data = { color = "%s" }
}
output "color" { value = kubernetes_config_map.managed.data.color }
`, name, ns, color)
}

// driftSource is the ConfigMap the run's module comes from.
func driftSource(name, color string) string {
	files, _ := json.Marshal(map[string]string{"main.tf": driftModule(name, color)})
	return fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata: {name: %s-src, namespace: %s}
data: %s
`, name, ns, files)
}

func driftRun(name, engine string) string {
	return fmt.Sprintf(`apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRun
metadata: {name: %s, namespace: %s}
spec:
  engine: %s
  source: {configMapRef: {name: %s-src}}
  approval: {mode: Auto}
  interval: 10s
  driftRemediation: Apply
  deletionPolicy: Destroy
  runner: {workspace: {size: 64Mi}}
`, name, ns, engine, name)
}

// runnerMayManageConfigMaps lets the step pods' service account manage the
// ConfigMap the drift module creates.
const runnerMayManageConfigMaps = `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: e2e-drift-configmaps, namespace: e2e}
rules:
- {apiGroups: [""], resources: [configmaps], verbs: [get, list, watch, create, update, patch, delete]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: e2e-drift-configmaps, namespace: e2e}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: e2e-drift-configmaps}
subjects:
- {kind: ServiceAccount, name: opr8r-runner, namespace: e2e}
`

func (e *env) managedColor(t *testing.T, name string) string {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name + "-managed"}, cm); err != nil {
		return ""
	}
	return cm.Data["color"]
}

func (e *env) waitColor(t *testing.T, name, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for e.managedColor(t, name) != want {
		if time.Now().After(deadline) {
			st, _ := json.MarshalIndent(e.get(t, name).Status, "", "  ")
			t.Fatalf("%s: the managed ConfigMap is %q after %s, want %q; status:\n%s", name, e.managedColor(t, name), timeout, want, st)
		}
		time.Sleep(time.Second)
	}
}

func condOf(run *infrav1.TerraformRun, typ string) string {
	for _, c := range run.Status.Conditions {
		if c.Type == typ {
			return fmt.Sprintf("%s=%s (%s): %s", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	return ""
}

// drift: a run creates a real ConfigMap; someone edits it with kubectl;
// the next scheduled check reports Drifted (~1) and, with
// driftRemediation Apply, an apply run restores it. Then the run's source
// (a ConfigMap) is edited: the next check sees a new revision and an apply
// run plans and applies it.
func drift(t *testing.T, e *env, engine string) {
	name := "drift-" + engine
	t.Cleanup(func() {
		_ = e.c.Delete(context.Background(), &infrav1.TerraformRun{ObjectMeta: objMeta(name)})
	})
	e.sh(t, driftSource(name, "blue"), e.kubectl, "apply", "-f", "-")
	e.sh(t, driftRun(name, engine), e.kubectl, "apply", "-f", "-")
	e.waitFor(t, name, "the first apply", 6*time.Minute, ready)
	e.waitColor(t, name, "blue", time.Minute)

	// Someone edits the managed ConfigMap by hand.
	e.sh(t, "", e.kubectl, "patch", "configmap", name+"-managed", "-n", ns, "--type=merge", "-p", `{"data":{"color":"red"}}`)
	run := e.waitFor(t, name, "the check that finds the drift", 6*time.Minute, func(r *infrav1.TerraformRun) bool {
		return r.Status.Drift != nil && r.Status.Drift.Result == infrav1.CheckDrifted
	})
	t.Logf("%s: %s", name, condOf(run, infrav1.DriftedCondition))
	if p := run.Status.Drift.Plan; p == nil || p.Change != 1 || p.Summary != "+0 ~1 -0" {
		t.Fatalf("the drift check's plan = %+v, want ~1", run.Status.Drift.Plan)
	}
	e.sh(t, "", e.kubectl, "get", "tfrun", name, "-n", ns, "-o", "wide") // logged: while repairing
	run = e.waitFor(t, name, "the drift repaired by an apply run", 6*time.Minute, func(r *infrav1.TerraformRun) bool {
		return r.Status.Run != nil && r.Status.Run.Trigger == infrav1.TriggerDrift && ready(r)
	})
	e.waitColor(t, name, "blue", time.Minute)
	t.Logf("%s: %s", name, condOf(run, infrav1.DriftedCondition))

	// The source moves: the module in the source ConfigMap now says green.
	e.sh(t, driftSource(name, "green"), e.kubectl, "apply", "-f", "-")
	run = e.waitFor(t, name, "the moved source applied", 6*time.Minute, func(r *infrav1.TerraformRun) bool {
		return r.Status.Run != nil && r.Status.Run.Trigger == infrav1.TriggerSourceChange && ready(r)
	})
	e.waitColor(t, name, "green", time.Minute)
	if run.Status.LastApplied == nil || !strings.HasPrefix(run.Status.LastApplied.Revision, "sha256:") {
		t.Fatalf("the moved source's revision is not recorded: %+v", run.Status.LastApplied)
	}
	e.sh(t, "", e.kubectl, "get", "tfrun", name, "-n", ns, "-o", "wide") // logged
	e.sh(t, "", e.tfrun, "history", name, "-n", ns)
}

func TestDrift(t *testing.T) {
	// The scenario tests run side by side (make e2e runs the faults of
	// TestChaos apart, after them).
	t.Parallel()
	e := setup(t)
	e.sh(t, runnerMayManageConfigMaps, e.kubectl, "apply", "-f", "-")
	for _, engine := range allEngines() {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			drift(t, e, engine)
		})
	}
}
