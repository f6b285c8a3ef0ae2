package plugin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/plugin"
	"github.com/opr8r/opr8r/pkg/testutil"
)

// seedStack makes a namespace with a three-layer stack (network, then
// cluster on it, then app on cluster and on a dns run in another
// namespace and a ghost that does not exist), and a cycle x -> y -> x.
func seedStack(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	ns := fmt.Sprintf("graph-%d", time.Now().UnixNano()%1000000)
	other := ns + "-shared"
	for _, n := range []string{ns, other} {
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	mk := func(w *testutil.RunWrapper, engine, phase, ready string, trigger infrav1.RunTrigger, detail string) {
		r := w.Obj()
		r.UID = ""
		if err := k8s.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		r.Status = infrav1.TerraformRunStatus{Phase: phase,
			Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionStatus(ready), Reason: "Succeeded", LastTransitionTime: metav1.Now()}},
			Run: &infrav1.RunStatus{ID: r.Name + "-1", Type: "apply", Engine: infrav1.EngineName(engine), SpecHash: "abc", Attempt: 1, Phase: infrav1.RunPhase(phase),
				Trigger: trigger, TriggerDetail: detail, Child: infrav1.ChildReference{APIVersion: "v1", Kind: "X", Name: r.Name + "-1"}}}
		if r.Name == "app" {
			r.Status.Conditions = append(r.Status.Conditions, metav1.Condition{Type: infrav1.DependenciesReadyCondition, Status: "False",
				Reason: infrav1.ReasonDependencyNotFound, Message: "dependency ghost (spec.dependsOn[2]) does not exist; no run starts until it does", LastTransitionTime: metav1.Now()})
		}
		if err := k8s.Status().Update(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	mk(testutil.MakeRun("dns", other), "job", "Succeeded", "True", infrav1.TriggerCreated, "")
	mk(testutil.MakeRun("network", ns), "argo", "Succeeded", "True", infrav1.TriggerCreated, "")
	mk(testutil.MakeRun("cluster", ns).DependsOn("", "network", true), "tekton", "Succeeded", "True",
		infrav1.TriggerDependencyChange, "dependency network: run network-2 changed its outputs")
	mk(testutil.MakeRun("app", ns).DependsOn("", "cluster", false, "endpoint=cluster_endpoint", "ca").DependsOn(other, "dns", false).DependsOn("", "ghost", false),
		"tekton", "AwaitingApproval", "Unknown", infrav1.TriggerCreated, "")
	mk(testutil.MakeRun("x", ns).DependsOn("", "y", false), "argo", "Pending", "Unknown", infrav1.TriggerCreated, "")
	mk(testutil.MakeRun("y", ns).DependsOn("", "x", false), "argo", "Pending", "Unknown", infrav1.TriggerCreated, "")
	return ns
}

func TestGraph(t *testing.T) {
	ns := seedStack(t)
	other := ns + "-shared"

	t.Run("text: layers in dependency order, state, what each takes", func(t *testing.T) {
		out, _, err := tfrun(ns, "graph")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("kubectl tfrun graph:\n%s", out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		want := [][]string{
			{"LAYER", "RUN", "ENGINE", "PHASE", "READY", "LAST TRIGGER", "DEPENDS ON"},
			{"0", other + "/dns", "job", "Succeeded", "True"},
			{"0", "network", "argo", "Succeeded", "True", "Created", "-"},
			{"1", "cluster", "tekton", "Succeeded", "True", "DependencyChange (network: run network-2 changed its outputs)", "network (all outputs)"},
			{"2", "app", "tekton", "AwaitingApproval", "Unknown", "cluster (endpoint→cluster_endpoint, ca), ghost, " + other + "/dns"},
			{"cycle", "x", "argo", "Pending", "y"},
			{"cycle", "y", "argo", "Pending", "x"},
			{"?", "ghost", "(missing)"},
			{"app: dependency ghost (spec.dependsOn[2]) does not exist"},
		}
		if len(lines) != len(want) {
			t.Fatalf("graph: %d lines, want %d:\n%s", len(lines), len(want), out)
		}
		for i, w := range want {
			for _, s := range w {
				if !strings.Contains(lines[i], s) {
					t.Errorf("line %d lacks %q: %s", i, s, lines[i])
				}
			}
		}
	})

	t.Run("dot", func(t *testing.T) {
		out, _, err := tfrun(ns, "graph", "-o", "dot")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			`digraph "` + ns + `" {`,
			`"network" -> "cluster" [label="all outputs"];`,
			`"cluster" -> "app" [label="endpoint→cluster_endpoint, ca"];`,
			`"` + other + `/dns" -> "app" [style=dashed];`,
			`"ghost" [label="ghost\n(missing)", style="dashed", color="gray50"];`,
			`"network" [label="network\nargo · Succeeded · Ready=True", fillcolor="palegreen"];`,
			`"x" [label="x\nargo · Pending · Ready=Unknown", fillcolor="mistyrose"];`,
		} {
			if !strings.Contains(out, want) {
				t.Errorf("dot lacks %s:\n%s", want, out)
			}
		}
		if !strings.HasSuffix(out, "}\n") {
			t.Errorf("dot is not closed:\n%s", out)
		}
	})

	t.Run("json", func(t *testing.T) {
		out, _, err := tfrun(ns, "graph", "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var g plugin.Graph
		if err := json.Unmarshal([]byte(out), &g); err != nil {
			t.Fatal(err)
		}
		if len(g.Nodes) != 7 || len(g.Edges) != 6 || g.Nodes[len(g.Nodes)-1].Name != "ghost" || !g.Nodes[len(g.Nodes)-1].Missing {
			t.Errorf("graph -o json = %s", out)
		}
	})

	t.Run("an empty namespace", func(t *testing.T) {
		_, errOut, err := tfrun(other+"-none", "graph")
		if err != nil || !strings.Contains(errOut, "No TerraformRuns found") {
			t.Errorf("graph of an empty namespace: %v %q", err, errOut)
		}
	})
}
