package plugin_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/opr8r/opr8r/pkg/engine"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/engines"
	"github.com/opr8r/opr8r/pkg/plugin"
	"github.com/opr8r/opr8r/pkg/testutil"
	"github.com/opr8r/opr8r/test/envtestutil"
)

var (
	k8s client.Client
	cs  kubernetes.Interface
	// restConfig is envtest's admin's, which may impersonate users.
	restConfig *rest.Config
)

func TestMain(m *testing.M) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run the tests with make test")
		os.Exit(1)
	}
	env, cfg, err := envtestutil.Start()
	if err != nil {
		panic(err)
	}
	scheme, _ := engine.Scheme(engines.All())
	k8s, _ = client.New(cfg, client.Options{Scheme: scheme})
	cs = kubernetes.NewForConfigOrDie(cfg)
	restConfig = cfg
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

const digest = "sha256:1111111111111111111111111111111111111111111111111111111111111111"

// tfrun runs `kubectl tfrun args...` in namespace ns.
func tfrun(ns string, args ...string) (string, string, error) {
	return tfrunWith(k8s, cs, ns, args...)
}

// tfrunWith runs `kubectl tfrun args...` in namespace ns with the given
// clients (another user's).
func tfrunWith(c client.Client, cs kubernetes.Interface, ns string, args ...string) (string, string, error) {
	var out, errOut bytes.Buffer
	flags := genericclioptions.NewConfigFlags(false)
	flags.Namespace = &ns
	o := &plugin.Options{IOStreams: genericiooptions.IOStreams{Out: &out, ErrOut: &errOut}, Flags: flags, Client: c, Clientset: cs, Engines: engines.All(), RestoreWait: time.Second,
		Now: func() time.Time { return time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC) }}
	cmd := plugin.NewCommand(o)
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// seededPlan is the readable plan of the seeded waiting run.
const seededPlan = "  # terraform_data.x will be created\nPlan: 1 to add, 0 to change, 0 to destroy.\n"

// sha is a record's digest as the plan step records it.
func sha(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// seed makes a run waiting for approval and a finished one with outputs, as
// the manager would leave them.
func seed(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	ns := fmt.Sprintf("plugin-%d", time.Now().UnixNano()%1000000)
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, st infrav1.TerraformRunStatus) {
		r := testutil.MakeRun(name, ns).Outputs(map[string]string{"id": "ID"}).Obj()
		r.UID = ""
		if err := k8s.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		r.Status = st
		if err := k8s.Status().Update(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	plan := &infrav1.PlanStatus{Add: 1, HasChanges: true, Digest: digest, Summary: "+1 ~0 -0", RunID: "waiting-abc-1", TextDigest: sha([]byte(seededPlan))}
	mk("waiting", infrav1.TerraformRunStatus{Phase: "AwaitingApproval", PlanSummary: "+1 ~0 -0", Plan: plan,
		Approvals: &infrav1.ApprovalTally{Digest: digest, Required: 2, ApprovedBy: []string{"alice"}, Needed: 1, Summary: "1/2"},
		Run: &infrav1.RunStatus{ID: "waiting-abc-1", Type: "apply", Engine: "argo", SpecHash: "abc", Attempt: 1, Phase: infrav1.RunAwaitingApproval,
			Child: infrav1.ChildReference{APIVersion: "argoproj.io/v1alpha1", Kind: "Workflow", Name: "waiting-abc-1"},
			Steps: []infrav1.StepStatus{{Name: "plan", Phase: "Succeeded"}, {Name: "approve", Phase: "Running"}}}})
	started, finished := metav1.NewTime(time.Date(2026, 11, 23, 11, 0, 0, 0, time.UTC)), metav1.NewTime(time.Date(2026, 11, 23, 11, 2, 30, 0, time.UTC))
	history := []infrav1.RunRecord{
		{ID: "done-2", Number: 2, Type: "apply", Engine: "tekton", Trigger: infrav1.TriggerRerunRequest, SpecHash: "abc",
			Revision: "0123456789abcdef0123456789abcdef01234567", Result: infrav1.RunRejected, StartedAt: &started, FinishedAt: &finished,
			Plan:     &infrav1.PlanStatus{Add: 2, Destroy: 1, HasChanges: true, Summary: "+2 ~0 -1", Digest: digest, RunID: "done-2"},
			Approval: &infrav1.ApprovalStatus{Digest: digest, Source: infrav1.ApprovedBySpec, By: "alice", Reason: "too big", At: finished},
			Message:  "plan rejected: too big"},
		{ID: "done-1", Number: 1, Type: "apply", Engine: "tekton", Trigger: infrav1.TriggerCreated, SpecHash: "abc", Result: infrav1.RunSucceeded,
			StartedAt: &started, FinishedAt: &finished, Plan: &infrav1.PlanStatus{Summary: "+0 ~0 -0", RunID: "done-1"}},
	}
	mk("done", infrav1.TerraformRunStatus{Phase: "Succeeded", OutputsSecretName: "done-outputs", Outputs: []string{"ID", "password"}, History: history,
		Conditions: []metav1.Condition{{Type: "Ready", Status: "True", Reason: "Succeeded", LastTransitionTime: metav1.Now()}},
		Run: &infrav1.RunStatus{ID: "done-abc-1", Type: "apply", Engine: "tekton", SpecHash: "abc", Attempt: 1, Phase: infrav1.RunSucceeded,
			Child: infrav1.ChildReference{APIVersion: "tekton.dev/v1", Kind: "PipelineRun", Name: "done-abc-1"}}})
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "waiting-abc-1-plan", Namespace: ns}, Data: map[string][]byte{"plan.txt": []byte(seededPlan)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "done-abc-1-tfoutputs", Namespace: ns}, Data: map[string][]byte{"outputs.json": []byte(
			`{"id":{"sensitive":false,"value":"i-123"},"password":{"sensitive":true,"value":"hunter2-marker"}}`)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "done-outputs", Namespace: ns}, Data: map[string][]byte{"ID": []byte("i-123"), "password": []byte("hunter2-marker")}},
	} {
		if err := k8s.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	return ns
}

func get(t *testing.T, ns, name string) *infrav1.TerraformRun {
	t.Helper()
	r := &infrav1.TerraformRun{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, r); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestPluginCommands(t *testing.T) {
	ns := seed(t)

	t.Run("list", func(t *testing.T) {
		out, _, err := tfrun(ns, "list")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"NAME", "ENGINE", "PHASE", "PLAN", "APPROVALS", "1/2", "STEP", "waiting", "argo", "AwaitingApproval", "+1 ~0 -0", "approve", "done", "tekton", "Succeeded"} {
			if !strings.Contains(out, want) {
				t.Errorf("list output lacks %q:\n%s", want, out)
			}
		}
		js, _, err := tfrun(ns, "get", "waiting", "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var rows []plugin.RunRow
		if err := json.Unmarshal([]byte(js), &rows); err != nil || len(rows) != 1 || rows[0].Step != "approve" {
			t.Errorf("-o json = %s (%v)", js, err)
		}
	})

	t.Run("history", func(t *testing.T) {
		out, _, err := tfrun(ns, "history", "done")
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 3 {
			t.Fatalf("history: want a header and two runs, newest first:\n%s", out)
		}
		for i, want := range [][]string{
			{"RUN", "ID", "TYPE", "TRIGGER", "REVISION", "PLAN", "APPROVAL", "RESULT", "STARTED", "DURATION", "MESSAGE"},
			{"2", "done-2", "apply", "RerunRequest", "0123456789ab", "+2 ~0 -1", "rejected (TerraformRun by alice)", "Rejected", "60m ago", "2m30s", "plan rejected: too big"},
			{"1", "done-1", "Created", "no changes", "Succeeded"},
		} {
			for _, w := range want {
				if !strings.Contains(lines[i], w) {
					t.Errorf("history line %d lacks %q:\n%s", i, w, out)
				}
			}
		}
		js, _, err := tfrun(ns, "history", "done", "-o", "json")
		var recs []infrav1.RunRecord
		if err != nil || json.Unmarshal([]byte(js), &recs) != nil || len(recs) != 2 || recs[0].Approval.By != "alice" {
			t.Errorf("history -o json: %v\n%s", err, js)
		}
		if _, errOut, err := tfrun(ns, "history", "waiting"); err != nil || !strings.Contains(errOut, "no finished run yet") {
			t.Errorf("history of a run without one: %v %q", err, errOut)
		}
	})

	t.Run("plan", func(t *testing.T) {
		out, _, err := tfrun(ns, "plan", "waiting")
		if err != nil || !strings.Contains(out, "terraform_data.x will be created") || !strings.Contains(out, digest) {
			t.Errorf("plan: %v\n%s", err, out)
		}
		if _, _, err := tfrun(ns, "plan", "done"); err == nil || !strings.Contains(err.Error(), "has no plan yet") {
			t.Errorf("plan of a run without plan: %v", err)
		}
	})

	t.Run("checks", func(t *testing.T) {
		ctx := context.Background()
		r := testutil.MakeRun("checked", ns).Check("policy", "conftest:1", "", "conftest", "test").Check("cost", "infracost:1", "", "infracost").Obj()
		r.UID = ""
		if err := k8s.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		r.Status = infrav1.TerraformRunStatus{Run: &infrav1.RunStatus{ID: "checked-1", Type: "apply", Engine: "argo", SpecHash: "abc", Attempt: 1, Phase: infrav1.RunFailed,
			Child: infrav1.ChildReference{APIVersion: "argoproj.io/v1alpha1", Kind: "Workflow", Name: "checked-1"},
			Steps: []infrav1.StepStatus{{Name: "plan", Phase: "Succeeded"}, {Name: "check-cost", Phase: "Succeeded"},
				{Name: "check-policy", Phase: "Failed", Message: "FAIL - main - terraform_data.x would be destroyed (exit code 1)"}}}}
		if err := k8s.Status().Update(ctx, r); err != nil {
			t.Fatal(err)
		}
		if err := k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "checked-1-check-policy", Namespace: ns},
			Data: map[string][]byte{"output.txt": []byte("FAIL - main - terraform_data.x would be destroyed\n1 test, 0 passed, 1 failure\n"), "exit-code": []byte("1")}}); err != nil {
			t.Fatal(err)
		}
		out, _, err := tfrun(ns, "checks", "checked")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"# check cost: Succeeded", "# check policy: Failed (exit code 1)", "1 test, 0 passed, 1 failure"} {
			if !strings.Contains(out, want) {
				t.Errorf("checks output lacks %q:\n%s", want, out)
			}
		}
		js, _, err := tfrun(ns, "checks", "checked", "-o", "json")
		var res []plugin.CheckResult
		if err != nil || json.Unmarshal([]byte(js), &res) != nil || len(res) != 2 || res[1].Name != "policy" || res[1].ExitCode != "1" {
			t.Errorf("checks -o json: %v\n%s", err, js)
		}
		if _, _, err := tfrun(ns, "checks", "done"); err == nil || !strings.Contains(err.Error(), "has no spec.checks") {
			t.Errorf("checks of a run without checks: %v", err)
		}
	})

	t.Run("errors are clear", func(t *testing.T) {
		for args, want := range map[string]string{
			"approve missing":                    `TerraformRun "missing" not found in namespace "` + ns + `"`,
			"approve done":                       "nothing to approve: TerraformRun done has no plan waiting for approval (run phase: Succeeded)",
			"approve waiting --plan sha256:nope": "wrong digest: you approved sha256:nope, but the plan waiting is " + digest,
			"reject done --reason x":             "nothing to reject",
			"logs waiting --step plan":           "no pod of step plan of run waiting-abc-1 (Workflow waiting-abc-1) exists",
			"outputs waiting":                    "has no outputs yet",
		} {
			_, _, err := tfrun(ns, strings.Fields(args)...)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("kubectl tfrun %s: err = %v, want %q", args, err, want)
			}
		}
		if got := get(t, ns, "waiting").Spec.Approval.ApprovedPlan; got != "" {
			t.Errorf("a refused approval changed the run: approvedPlan = %q", got)
		}
	})

	t.Run("outputs hide sensitive values", func(t *testing.T) {
		out, _, err := tfrun(ns, "outputs", "done")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "i-123") || !strings.Contains(out, "<sensitive>") || strings.Contains(out, "hunter2-marker") {
			t.Errorf("outputs:\n%s", out)
		}
		out, _, _ = tfrun(ns, "outputs", "done", "--show-sensitive")
		if !strings.Contains(out, "hunter2-marker") {
			t.Errorf("--show-sensitive does not show the value:\n%s", out)
		}
		js, _, _ := tfrun(ns, "outputs", "done", "-o", "json")
		if strings.Contains(js, "hunter2-marker") || !strings.Contains(js, `"sensitive": true`) {
			t.Errorf("-o json leaks or lacks sensitivity:\n%s", js)
		}
	})

	t.Run("an approval the policy would not count is refused, and nothing recorded", func(t *testing.T) {
		ctx := context.Background()
		w := get(t, ns, "waiting")
		g := w.DeepCopy()
		g.ObjectMeta = metav1.ObjectMeta{Name: "guarded", Namespace: ns}
		g.Spec.Approval.Approvers = &infrav1.Approvers{Users: []string{"alice"}}
		if err := k8s.Create(ctx, g); err != nil {
			t.Fatal(err)
		}
		g.Status = w.Status
		if err := k8s.Status().Update(ctx, g); err != nil {
			t.Fatal(err)
		}
		before := len(decisions(t, ns))
		out, _, err := tfrun(ns, "approve", "guarded")
		if !errors.Is(err, plugin.ErrNotCounted) || !strings.Contains(err.Error(), "would not count: not in spec.approval.approvers") || strings.Contains(out, "approved plan") {
			t.Fatalf("approve by someone not in approvers: %v; out %q; want ErrNotCounted naming spec.approval.approvers, and no 'approved'", err, out)
		}
		if got := len(decisions(t, ns)); got != before {
			t.Fatalf("%d TerraformRunApprovals after a refused approval, want %d", got, before)
		}
		if err := k8s.Delete(ctx, g); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("an approval no Require rule still open counts is refused, as the manager would", func(t *testing.T) {
		ctx := context.Background()
		w := get(t, ns, "waiting")
		g := w.DeepCopy()
		g.ObjectMeta = metav1.ObjectMeta{Name: "ruled", Namespace: ns}
		g.Spec.Approval.Rules = []infrav1.ApprovalRule{{Name: "iam-needs-sam", Condition: "true", Effect: infrav1.RuleRequire,
			Require: &infrav1.RuleRequirement{Approvals: 1, Approvers: &infrav1.Approvers{Users: []string{"sam"}}}}}
		if err := k8s.Create(ctx, g); err != nil {
			t.Fatal(err)
		}
		g.Status = w.Status
		// The manager's tally: requiredApprovals met by ann, the rule open.
		g.Status.Approvals = &infrav1.ApprovalTally{Digest: digest, Required: 1, Needed: 1, ApprovedBy: []string{"ann"}, Summary: "0/1",
			Rules: []infrav1.RuleTally{{Name: "iam-needs-sam", Effect: infrav1.RuleRequire, Required: 1, Needed: 1}}}
		if err := k8s.Status().Update(ctx, g); err != nil {
			t.Fatal(err)
		}
		// ann's approval, which the tally counted (admission stamps her).
		cfg := rest.CopyConfig(restConfig)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "ann", Groups: []string{"system:masters"}}
		asAnn, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
		if err != nil {
			t.Fatal(err)
		}
		ann := &infrav1.TerraformRunApproval{ObjectMeta: metav1.ObjectMeta{Name: "ruled-ann", Namespace: ns},
			Spec: infrav1.TerraformRunApprovalSpec{RunName: "ruled", PlanDigest: digest, Decision: infrav1.DecisionApprove}}
		if err := asAnn.Create(ctx, ann); err != nil {
			t.Fatal(err)
		}
		defer k8s.Delete(ctx, ann)
		before := len(decisions(t, ns))
		out, _, err := tfrun(ns, "approve", "ruled")
		if !errors.Is(err, plugin.ErrNotCounted) || !strings.Contains(err.Error(), "it meets none of the Require rules the plan still needs (rule iam-needs-sam needs 1 more from users sam)") || strings.Contains(out, "approved plan") {
			t.Fatalf("approve by someone the open rule does not count: %v; out %q; want ErrNotCounted naming the rule and its approvers, and no 'approved'", err, out)
		}
		if got := len(decisions(t, ns)); got != before {
			t.Fatalf("%d TerraformRunApprovals after a refused approval, want %d", got, before)
		}
		if err := k8s.Delete(ctx, g); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("approve binds the current digest", func(t *testing.T) {
		out, _, err := tfrun(ns, "approve", "waiting", "--plan", digest)
		if err != nil || !strings.Contains(out, "approved plan "+digest) {
			t.Fatalf("approve: %v %s", err, out)
		}
		a := decisions(t, ns)
		if len(a) != 1 || a[0].Spec.PlanDigest != digest || a[0].Spec.Decision != infrav1.DecisionApprove || a[0].Spec.RunName != "waiting" {
			t.Fatalf("approvals = %+v", a)
		}
		if a[0].Spec.User == "" || !strings.Contains(out, " as "+a[0].Spec.User) {
			t.Errorf("the approval has no stamped user (%q), or the plugin does not say it: %s", a[0].Spec.User, out)
		}
		if r := get(t, ns, "waiting"); len(a[0].OwnerReferences) != 1 || a[0].OwnerReferences[0].UID != r.UID {
			t.Errorf("the approval is not owned by its run: %+v", a[0].OwnerReferences)
		}
		if got := get(t, ns, "waiting").Spec.Approval.ApprovedPlan; got != "" {
			t.Errorf("approve wrote the run's spec: approvedPlan = %q", got)
		}
	})

	t.Run("reject and rerun", func(t *testing.T) {
		if _, _, err := tfrun(ns, "reject", "waiting", "--reason", "too risky"); err != nil {
			t.Fatal(err)
		}
		a := decisions(t, ns)
		if len(a) != 2 {
			t.Fatalf("approvals = %+v", a)
		}
		rejected := false
		for _, x := range a {
			rejected = rejected || (x.Spec.Decision == infrav1.DecisionReject && x.Spec.Reason == "too risky" && x.Spec.PlanDigest == digest)
		}
		if !rejected {
			t.Errorf("no rejection among %+v", a)
		}
		if _, _, err := tfrun(ns, "rerun", "done"); err != nil {
			t.Fatal(err)
		}
		if got := get(t, ns, "done").Annotations[infrav1.RunRequestAnnotation]; got != "2026-11-23T12:00:00Z" {
			t.Errorf("rerun annotation = %q", got)
		}
	})
}

// decisions lists the namespace's TerraformRunApprovals.
func decisions(t *testing.T, ns string) []infrav1.TerraformRunApproval {
	t.Helper()
	l := &infrav1.TerraformRunApprovalList{}
	if err := k8s.List(context.Background(), l, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return l.Items
}
