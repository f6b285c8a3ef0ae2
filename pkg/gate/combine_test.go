package gate

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

func ns(name string, ap infrav1.ApprovalPolicy) Policy {
	return Policy{Ref: infrav1.PolicyRef{Kind: KindNamespaced, Name: name, Generation: 1}, Approval: ap}
}

func TestCombineStrictestWins(t *testing.T) {
	hour, day := &metav1.Duration{Duration: time.Hour}, &metav1.Duration{Duration: 24 * time.Hour}
	deny := infrav1.ApprovalRule{Name: "destroy", Condition: "plan.destroy > 0", Effect: infrav1.RuleDeny}
	win := infrav1.ChangeWindow{Name: "friday", Type: infrav1.WindowDeny, Schedule: "0 12 * * 5", Duration: metav1.Duration{Duration: 12 * time.Hour}}
	runDefaults := infrav1.ApprovalSpec{Mode: infrav1.ApprovalManual, RequiredApprovals: 1, SelfApproval: infrav1.SelfApprovalAllowed, Rejection: infrav1.RejectByAny}
	cases := []struct {
		name     string
		run      infrav1.ApprovalSpec
		policies []Policy
		check    func(t *testing.T, g Governed)
	}{
		{"no policy leaves spec.approval as it is", infrav1.ApprovalSpec{Mode: infrav1.ApprovalAuto, RequiredApprovals: 1, Rules: []infrav1.ApprovalRule{deny}}, nil, func(t *testing.T, g Governed) {
			if g.Approval.Mode != infrav1.ApprovalAuto || len(g.Approval.Rules) != 1 || g.Approval.Rules[0].Name != "destroy" || g.Refs != nil {
				t.Fatalf("changed: %+v", g)
			}
		}},
		{"a policy's Manual beats the run's Auto", infrav1.ApprovalSpec{Mode: infrav1.ApprovalAuto}, []Policy{ns("p", infrav1.ApprovalPolicy{Mode: infrav1.ApprovalManual})}, func(t *testing.T, g Governed) {
			if g.Approval.Mode != infrav1.ApprovalManual {
				t.Fatalf("mode %s", g.Approval.Mode)
			}
		}},
		{"a policy's Auto never loosens the run's Manual", runDefaults, []Policy{ns("p", infrav1.ApprovalPolicy{Mode: infrav1.ApprovalAuto})}, func(t *testing.T, g Governed) {
			if g.Approval.Mode != infrav1.ApprovalManual {
				t.Fatalf("mode %s", g.Approval.Mode)
			}
		}},
		{"a policy that leaves mode out keeps the run's Auto", infrav1.ApprovalSpec{Mode: infrav1.ApprovalAuto}, []Policy{ns("p", infrav1.ApprovalPolicy{RequiredApprovals: 2})}, func(t *testing.T, g Governed) {
			if g.Approval.Mode != infrav1.ApprovalAuto || g.Approval.RequiredApprovals != 2 {
				t.Fatalf("mode %s required %d", g.Approval.Mode, g.Approval.RequiredApprovals)
			}
		}},
		{"the most approvals, the shortest timeout, Forbidden, Any", infrav1.ApprovalSpec{Mode: infrav1.ApprovalManual, RequiredApprovals: 3, Timeout: day, Rejection: infrav1.RejectByQuorum, SelfApproval: infrav1.SelfApprovalAllowed},
			[]Policy{ns("a", infrav1.ApprovalPolicy{RequiredApprovals: 2, Timeout: hour, SelfApproval: infrav1.SelfApprovalForbidden}), ns("b", infrav1.ApprovalPolicy{Rejection: infrav1.RejectByAny, Timeout: day})}, func(t *testing.T, g Governed) {
				ap := g.Approval
				if ap.RequiredApprovals != 3 || ap.Timeout.Duration != time.Hour || ap.SelfApproval != infrav1.SelfApprovalForbidden || ap.Rejection != infrav1.RejectByAny {
					t.Fatalf("got %+v", ap)
				}
			}},
		{"quorum only when every layer says so", infrav1.ApprovalSpec{Rejection: infrav1.RejectByQuorum}, []Policy{ns("a", infrav1.ApprovalPolicy{Rejection: infrav1.RejectByQuorum})}, func(t *testing.T, g Governed) {
			if g.Approval.Rejection != infrav1.RejectByQuorum {
				t.Fatalf("rejection %s", g.Approval.Rejection)
			}
		}},
		{"approvers: only who every layer names", infrav1.ApprovalSpec{Approvers: &infrav1.Approvers{Users: []string{"alice", "bob"}, Groups: []string{"ops", "sec"}}},
			[]Policy{ns("a", infrav1.ApprovalPolicy{Approvers: &infrav1.Approvers{Users: []string{"bob", "carol"}, Groups: []string{"sec"}}})}, func(t *testing.T, g Governed) {
				a := g.Approval.Approvers
				if len(a.Users) != 1 || a.Users[0] != "bob" || len(a.Groups) != 1 || a.Groups[0] != "sec" {
					t.Fatalf("approvers %+v", a)
				}
				if !Allowed(a, "dave", []string{"sec"}) || Allowed(a, "alice", []string{"ops"}) || Allowed(a, "carol", nil) {
					t.Fatal("the intersection admits the wrong people")
				}
			}},
		{"approvers with nobody in common let nobody decide, and say so", infrav1.ApprovalSpec{Approvers: &infrav1.Approvers{Users: []string{"alice"}}},
			[]Policy{ns("a", infrav1.ApprovalPolicy{Approvers: &infrav1.Approvers{Groups: []string{"sec"}}})}, func(t *testing.T, g Governed) {
				if !Nobody(g.Approval.Approvers) || Allowed(g.Approval.Approvers, "alice", []string{"sec"}) {
					t.Fatalf("approvers %+v", g.Approval.Approvers)
				}
				if why := Why(g.Approval, nil, "alice", []string{"sec"}, true); why == "" {
					t.Fatal("a vote counted though nobody may decide")
				}
			}},
		{"a policy's approvers apply to a run that names none", runDefaults, []Policy{ns("a", infrav1.ApprovalPolicy{Approvers: &infrav1.Approvers{Groups: []string{"sec"}}})}, func(t *testing.T, g Governed) {
			if Allowed(g.Approval.Approvers, "mallory", nil) || !Allowed(g.Approval.Approvers, "sue", []string{"sec"}) {
				t.Fatalf("approvers %+v", g.Approval.Approvers)
			}
		}},
		{"rules and windows are every layer's, named by policy", infrav1.ApprovalSpec{Rules: []infrav1.ApprovalRule{deny}},
			[]Policy{ns("team", infrav1.ApprovalPolicy{Rules: []infrav1.ApprovalRule{deny}, Windows: []infrav1.ChangeWindow{win}}),
				{Ref: infrav1.PolicyRef{Kind: KindCluster, Name: "platform"}, Approval: infrav1.ApprovalPolicy{Rules: []infrav1.ApprovalRule{deny}, Windows: []infrav1.ChangeWindow{win}}}}, func(t *testing.T, g Governed) {
				var names []string
				for _, r := range g.Approval.Rules {
					names = append(names, r.Name)
				}
				if len(names) != 3 || names[0] != "destroy" || names[1] != "team/destroy" || names[2] != "cluster/platform/destroy" {
					t.Fatalf("rules %v", names)
				}
				if len(g.Windows) != 2 || g.Windows[0][0].Name != "team/friday" || g.Windows[1][0].Name != "cluster/platform/friday" || len(g.Approval.Windows) != 2 {
					t.Fatalf("windows %+v", g.Windows)
				}
				if len(g.Refs) != 2 {
					t.Fatalf("refs %+v", g.Refs)
				}
			}},
		{"combining does not change the policies' rules", runDefaults, []Policy{ns("team", infrav1.ApprovalPolicy{Rules: []infrav1.ApprovalRule{deny}})}, func(t *testing.T, g Governed) {
			if deny.Name != "destroy" {
				t.Fatal("the input rule was renamed")
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.check(t, Combine(c.run, c.policies)) })
	}
}

func TestSelect(t *testing.T) {
	nsPol := []infrav1.TerraformRunPolicy{{ObjectMeta: metav1.ObjectMeta{Name: "b", Generation: 2}}, {ObjectMeta: metav1.ObjectMeta{Name: "a", Generation: 1}}}
	cl := []infrav1.ClusterTerraformRunPolicy{
		{ObjectMeta: metav1.ObjectMeta{Name: "everywhere"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "prod"}, Spec: infrav1.ClusterTerraformRunPolicySpec{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "broken"}, Spec: infrav1.ClusterTerraformRunPolicySpec{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: "Bogus"}}}}},
	}
	names := func(ps []Policy) (out []string) {
		for _, p := range ps {
			out = append(out, p.Ref.Kind+"/"+p.Ref.Name)
		}
		return out
	}
	got := names(Select(nsPol, cl, labels.Set{"env": "dev"}))
	want := []string{"TerraformRunPolicy/a", "TerraformRunPolicy/b", "ClusterTerraformRunPolicy/broken", "ClusterTerraformRunPolicy/everywhere"}
	if len(got) != len(want) {
		t.Fatalf("dev: got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("dev: got %v, want %v", got, want)
		}
	}
	if got := names(Select(nil, cl, labels.Set{"env": "prod"})); len(got) != 3 {
		t.Fatalf("prod: %v", got)
	}
	if got := names(Select(nil, cl, nil)); len(got) != 3 {
		t.Fatalf("unknown labels must select every cluster policy: %v", got)
	}
	if !NeedsLabels(cl) || NeedsLabels(cl[:1]) {
		t.Fatal("NeedsLabels")
	}
}

func TestChanged(t *testing.T) {
	a1 := infrav1.PolicyRef{Kind: KindNamespaced, Name: "a", Generation: 1}
	a2 := infrav1.PolicyRef{Kind: KindNamespaced, Name: "a", Generation: 2}
	b := infrav1.PolicyRef{Kind: KindCluster, Name: "b", Generation: 1}
	for _, c := range []struct {
		rec, now []infrav1.PolicyRef
		want     bool
	}{
		{nil, nil, false},
		{[]infrav1.PolicyRef{a1}, []infrav1.PolicyRef{a1}, false},
		{[]infrav1.PolicyRef{a1, b}, []infrav1.PolicyRef{b, a1}, false},
		{[]infrav1.PolicyRef{a1}, []infrav1.PolicyRef{a2}, true},
		{[]infrav1.PolicyRef{a1}, []infrav1.PolicyRef{a1, b}, true},
		{[]infrav1.PolicyRef{a1, b}, []infrav1.PolicyRef{a1}, true},
		{nil, []infrav1.PolicyRef{b}, true},
		// Deleted and made again under its name, at generation 1 again.
		{[]infrav1.PolicyRef{{Kind: KindNamespaced, Name: "a", Generation: 1, UID: "u1"}}, []infrav1.PolicyRef{{Kind: KindNamespaced, Name: "a", Generation: 1, UID: "u2"}}, true},
	} {
		if got := Change(c.rec, c.now); (got != "") != c.want {
			t.Errorf("Change(%v, %v) = %q, want a change: %v", c.rec, c.now, got, c.want)
		}
	}
}

func TestEffectiveRoundTrip(t *testing.T) {
	g := Combine(infrav1.ApprovalSpec{Mode: infrav1.ApprovalManual, RequiredApprovals: 1}, []Policy{ns("a", infrav1.ApprovalPolicy{RequiredApprovals: 2, SelfApproval: infrav1.SelfApprovalForbidden, Approvers: &infrav1.Approvers{Users: []string{"x", "y"}}})})
	e := Effective(g)
	ap := FromEffective(e)
	if ap.RequiredApprovals != 2 || ap.SelfApproval != infrav1.SelfApprovalForbidden || len(ap.Approvers.Users) != 2 || len(e.Policies) != 1 {
		t.Fatalf("effective %+v", e)
	}
	if Why(ap, []string{"x"}, "x", nil, true) == "" || Why(ap, []string{"x"}, "y", nil, true) != "" || Why(ap, nil, "z", nil, true) == "" {
		t.Fatal("the recorded policy counts votes differently from the combined one")
	}
}

// TestWaivedByLayer: an AutoApprove rule waives its own layer's
// requirement and the layers' below, never a peer's or a higher one's: a
// namespace policy's add-only rule never waives a cluster policy's two
// approvals (found by the attack review: it did).
func TestWaivedByLayer(t *testing.T) {
	cl := func(name string, ap infrav1.ApprovalPolicy) Policy {
		return Policy{Ref: infrav1.PolicyRef{Kind: KindCluster, Name: name}, Approval: ap}
	}
	run := infrav1.ApprovalSpec{Mode: infrav1.ApprovalManual, RequiredApprovals: 1}
	auto := infrav1.ApprovalSpec{Mode: infrav1.ApprovalAuto, RequiredApprovals: 1}
	for _, c := range []struct {
		name     string
		run      infrav1.ApprovalSpec
		policies []Policy
		rules    []string
		want     int32
	}{
		{"the run's own rule waives its Manual", run, nil, []string{"add-only"}, 0},
		{"a namespace policy's rule waives the run's default Manual", run, []Policy{ns("team", infrav1.ApprovalPolicy{})}, []string{"team/add-only"}, 0},
		{"a namespace policy's rule never waives a cluster policy's two approvals", run,
			[]Policy{ns("team", infrav1.ApprovalPolicy{}), cl("platform", infrav1.ApprovalPolicy{Mode: infrav1.ApprovalManual, RequiredApprovals: 2})}, []string{"team/add-only"}, 2},
		{"a namespace policy named cluster is no cluster policy", run,
			[]Policy{ns("cluster", infrav1.ApprovalPolicy{}), cl("platform", infrav1.ApprovalPolicy{Mode: infrav1.ApprovalManual, RequiredApprovals: 2})}, []string{"cluster/add-only"}, 2},
		{"nor another namespace policy's", run,
			[]Policy{ns("a", infrav1.ApprovalPolicy{RequiredApprovals: 3}), ns("b", infrav1.ApprovalPolicy{})}, []string{"b/add-only"}, 3},
		{"the run's own rule never waives a policy's", run, []Policy{ns("team", infrav1.ApprovalPolicy{Mode: infrav1.ApprovalManual})}, []string{"add-only"}, 1},
		{"a cluster policy's rule waives every layer", run,
			[]Policy{ns("team", infrav1.ApprovalPolicy{RequiredApprovals: 2}), cl("platform", infrav1.ApprovalPolicy{Mode: infrav1.ApprovalManual, RequiredApprovals: 2})}, []string{"cluster/platform/add-only"}, 0},
		{"mode Auto everywhere needs nobody", auto, []Policy{ns("team", infrav1.ApprovalPolicy{})}, nil, 0},
		{"a policy's requiredApprovals binds once a layer says Manual", auto,
			[]Policy{ns("team", infrav1.ApprovalPolicy{RequiredApprovals: 2}), cl("platform", infrav1.ApprovalPolicy{Mode: infrav1.ApprovalManual})}, []string{"cluster/platform/add-only"}, 0},
		{"and is not waived by the run's rule", auto,
			[]Policy{ns("team", infrav1.ApprovalPolicy{RequiredApprovals: 2}), cl("platform", infrav1.ApprovalPolicy{Mode: infrav1.ApprovalManual})}, []string{"add-only"}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Waived(Combine(c.run, c.policies), c.rules); got != c.want {
				t.Fatalf("Waived = %d, want %d", got, c.want)
			}
		})
	}
}

func TestPolicyChangeSaysWhat(t *testing.T) {
	rec := []infrav1.PolicyRef{{Kind: "TerraformRunPolicy", Name: "a", Generation: 1}, {Kind: "ClusterTerraformRunPolicy", Name: "gone", Generation: 3}}
	now := []infrav1.PolicyRef{{Kind: "TerraformRunPolicy", Name: "a", Generation: 2}, {Kind: "TerraformRunPolicy", Name: "new", Generation: 1}}
	msg := Change(rec, now)
	for _, want := range []string{"TerraformRunPolicy a changed (generation 2, was 1)", "TerraformRunPolicy new was added", "ClusterTerraformRunPolicy gone was deleted"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
}
