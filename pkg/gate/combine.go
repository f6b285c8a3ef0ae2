package gate

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// Policy is one policy that governs a run: a TerraformRunPolicy in its
// namespace or a ClusterTerraformRunPolicy that selects the namespace.
type Policy struct {
	Ref      infrav1.PolicyRef
	Approval infrav1.ApprovalPolicy
}

// Governed is a run's spec.approval combined with the policies that
// govern it: what the gate decides with.
type Governed struct {
	// Approval is the combined policy. Its rules and windows are every
	// policy's and the run's, the policies' named <policy>/<name>
	// (cluster/<policy>/<name> for a cluster policy's).
	Approval infrav1.ApprovalSpec
	// Windows are the change windows of each layer (the run's first, then
	// each policy's) apart: a plan applies only when every layer's windows
	// let it, so one policy's Allow window never opens another's.
	Windows [][]infrav1.ChangeWindow
	// WindowsOf name each of Windows' layers by its prefix ("" for the
	// run's own).
	WindowsOf []string
	// Refs name the policies, in the order given.
	Refs []infrav1.PolicyRef
	// Needs are the approvals each layer asks of people by itself, keyed
	// by the prefix of its rules' names ("" for the run's own, Prefix for
	// a policy's): an AutoApprove rule waives its own layer's, never
	// another's (Waived).
	Needs map[string]int32
}

// layerNeed is the approvals a layer asks of people when the combined
// mode is Manual: its requiredApprovals (at least one when it says Manual
// itself), none when it leaves both out.
func layerNeed(mode infrav1.ApprovalMode, req int32) int32 {
	if mode == infrav1.ApprovalManual || mode == "" && req > 0 {
		return max(req, 1)
	}
	return req
}

// Combine combines a run's spec.approval with the policies that govern it;
// the strictest wins, field by field:
//
//   - mode Manual when any layer says Manual;
//   - the most requiredApprovals;
//   - approvers: only those every layer that names approvers lets decide
//     (a user named by each, or a group named by each; a user one layer
//     names and another admits by group is not representable and is left
//     out, which is stricter);
//   - selfApproval Forbidden when any forbids it;
//   - rejection Any when any layer says Any (one rejection rejects);
//   - the shortest timeout;
//   - every layer's rules and windows.
//
// With no policy, the result is spec.approval unchanged. Combine never
// reads the per-plan decision fields of a policy: a policy has none.
func Combine(run infrav1.ApprovalSpec, policies []Policy) Governed {
	g := Governed{Approval: run, Needs: map[string]int32{}}
	if len(run.Windows) > 0 {
		g.Windows = append(g.Windows, run.Windows)
		g.WindowsOf = append(g.WindowsOf, "")
	}
	runMode := run.Mode
	if runMode == "" {
		runMode = infrav1.ApprovalManual // the CRD's default
	}
	if runMode == infrav1.ApprovalManual {
		g.Needs[""] = max(run.RequiredApprovals, 1)
	}
	if len(policies) == 0 {
		return g
	}
	ap := &g.Approval
	ap.Rules = slices.Clone(run.Rules)
	ap.Windows = slices.Clone(run.Windows)
	for _, p := range policies {
		g.Refs = append(g.Refs, p.Ref)
		pa := p.Approval
		if pa.Mode == infrav1.ApprovalManual || ap.Mode == "" {
			ap.Mode = infrav1.ApprovalManual
		}
		ap.RequiredApprovals = max(ap.RequiredApprovals, pa.RequiredApprovals)
		ap.Approvers = Intersect(ap.Approvers, pa.Approvers)
		if pa.SelfApproval == infrav1.SelfApprovalForbidden {
			ap.SelfApproval = infrav1.SelfApprovalForbidden
		}
		if pa.Rejection == infrav1.RejectByAny || ap.Rejection == "" {
			ap.Rejection = infrav1.RejectByAny
		}
		if pa.Timeout != nil && (ap.Timeout == nil || pa.Timeout.Duration < ap.Timeout.Duration) {
			t := *pa.Timeout
			ap.Timeout = &t
		}
		prefix := Prefix(p.Ref)
		if n := layerNeed(pa.Mode, pa.RequiredApprovals); n > 0 {
			g.Needs[prefix] = n
		}
		for _, r := range pa.Rules {
			r = *r.DeepCopy()
			r.Name = prefix + r.Name
			ap.Rules = append(ap.Rules, r)
		}
		var ws []infrav1.ChangeWindow
		for _, w := range pa.Windows {
			w.Name = prefix + w.Name
			ws = append(ws, w)
		}
		if len(ws) > 0 {
			ap.Windows = append(ap.Windows, ws...)
			g.Windows = append(g.Windows, ws)
			g.WindowsOf = append(g.WindowsOf, prefix)
		}
	}
	return g
}

// Waived is the approvals people must still give a plan that AutoApprove
// rules matched (approvedRules names them): the most any layer asks that
// no matched rule waives. A rule waives the requirement of its own layer
// and of the layers below it, never a peer's or one above: a cluster
// policy's rule waives every layer; a namespace policy's its own and the
// run's (whose Manual is the CRD's default, and which a policy admin may
// loosen anyway), never another namespace policy's or a cluster policy's;
// the run's own rule only the run's. So a namespace policy's "add-only
// goes through" never waives a cluster policy's two approvals. Without a
// Manual layer (mode Auto), nothing is needed.
func Waived(g Governed, approvedRules []string) int32 {
	if g.Approval.Mode != infrav1.ApprovalManual {
		return 0
	}
	var need int32
	for layer, n := range g.Needs {
		waived := false
		for _, name := range approvedRules {
			from := RulePrefix(name)
			if from == layer || rank(from) > rank(layer) {
				waived = true
				break
			}
		}
		if !waived {
			need = max(need, n)
		}
	}
	return need
}

// ClusterLayer says whether a layer (by its prefix) is a cluster policy's,
// whose change windows a namespace's policy admin may not override.
func ClusterLayer(prefix string) bool { return rank(prefix) == 2 }

// rank is a layer's authority: the run's own 0, a namespace policy's 1
// ("<policy>/"), a cluster policy's 2 ("cluster/<policy>/": two slashes,
// which no namespace policy's name can give, as names hold none; a
// namespace policy named cluster is "cluster/").
func rank(prefix string) int {
	return strings.Count(prefix, "/")
}

// RulePrefix is the layer a combined rule's name comes from: "" for the
// run's own, "<policy>/" or "cluster/<policy>/" for a policy's (rule names
// are DNS labels, without "/").
func RulePrefix(name string) string {
	if i := strings.LastIndex(name, "/"); i >= 0 {
		return name[:i+1]
	}
	return ""
}

// Prefix is what a policy's rules and windows are named with in a run's
// status: "<policy>/", or "cluster/<policy>/" for a cluster policy's.
func Prefix(ref infrav1.PolicyRef) string {
	if ref.Kind == KindCluster {
		return "cluster/" + ref.Name + "/"
	}
	return ref.Name + "/"
}

// The kinds of policy, as PolicyRef names them.
const (
	KindNamespaced = "TerraformRunPolicy"
	KindCluster    = "ClusterTerraformRunPolicy"
)

// Intersect is who both a and b let decide (nil: anyone). It keeps the
// users both name and the groups both name: a user one names and the
// other admits by a group cannot be written as one list, and is left out.
func Intersect(a, b *infrav1.Approvers) *infrav1.Approvers {
	switch {
	case b == nil:
		return a
	case a == nil:
		return b.DeepCopy()
	}
	out := &infrav1.Approvers{}
	for _, u := range a.Users {
		if slices.Contains(b.Users, u) {
			out.Users = append(out.Users, u)
		}
	}
	for _, gr := range a.Groups {
		if slices.Contains(b.Groups, gr) {
			out.Groups = append(out.Groups, gr)
		}
	}
	return out
}

// Nobody says whether the combined approvers let nobody decide (the
// layers name no user and no group in common).
func Nobody(a *infrav1.Approvers) bool {
	return a != nil && len(a.Users) == 0 && len(a.Groups) == 0
}

// Effective is the part of g that counts a vote, as status.approvals.policy
// records it for kubectl tfrun approve.
func Effective(g Governed) *infrav1.EffectiveApproval {
	ap := g.Approval
	e := &infrav1.EffectiveApproval{
		Policies:          g.Refs,
		Mode:              ap.Mode,
		RequiredApprovals: Required(ap),
		Approvers:         ap.Approvers.DeepCopy(),
		SelfApproval:      ap.SelfApproval,
		Rejection:         ap.Rejection,
	}
	for layer, n := range g.Needs {
		e.Layers = append(e.Layers, infrav1.LayerApprovals{Layer: layer, Approvals: n})
	}
	slices.SortFunc(e.Layers, func(a, b infrav1.LayerApprovals) int { return strings.Compare(a.Layer, b.Layer) })
	return e
}

// FromEffective is the policy a vote is counted under, from what the
// manager recorded (status.approvals.policy).
func FromEffective(e *infrav1.EffectiveApproval) infrav1.ApprovalSpec {
	return infrav1.ApprovalSpec{
		Mode:              e.Mode,
		RequiredApprovals: e.RequiredApprovals,
		Approvers:         e.Approvers.DeepCopy(),
		SelfApproval:      e.SelfApproval,
		Rejection:         e.Rejection,
	}
}

// Change says how the policies that govern a run changed since its plan
// reached the gate ("" when they have not): one added, changed (another
// generation), deleted, or deleted and made again (another uid).
func Change(recorded, now []infrav1.PolicyRef) string {
	var parts []string
	for _, p := range now {
		i := slices.IndexFunc(recorded, func(r infrav1.PolicyRef) bool { return r.Kind == p.Kind && r.Name == p.Name })
		switch {
		case i < 0:
			parts = append(parts, fmt.Sprintf("%s %s was added", p.Kind, p.Name))
		case recorded[i].UID != p.UID:
			parts = append(parts, fmt.Sprintf("%s %s was deleted and made again", p.Kind, p.Name))
		case recorded[i].Generation != p.Generation:
			parts = append(parts, fmt.Sprintf("%s %s changed (generation %d, was %d)", p.Kind, p.Name, p.Generation, recorded[i].Generation))
		}
	}
	for _, p := range recorded {
		if !slices.ContainsFunc(now, func(n infrav1.PolicyRef) bool { return n.Kind == p.Kind && n.Name == p.Name }) {
			parts = append(parts, fmt.Sprintf("%s %s was deleted", p.Kind, p.Name))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "the policies that govern the run changed while the plan waited (" + strings.Join(parts, "; ") + ")"
}

// Select is the policies that govern the runs of a namespace with labels
// nsLabels, in a stable order: the namespace's TerraformRunPolicies (ns)
// by name, then the ClusterTerraformRunPolicies (cl) whose
// namespaceSelector picks it, by name. A selector that does not parse
// picks every namespace (governed, not loosened); so does any selector
// when nsLabels is nil (the namespace's labels could not be read, which
// only kubectl tfrun policy test allows).
func Select(ns []infrav1.TerraformRunPolicy, cl []infrav1.ClusterTerraformRunPolicy, nsLabels labels.Set) []Policy {
	ns, cl = slices.Clone(ns), slices.Clone(cl)
	slices.SortFunc(ns, func(a, b infrav1.TerraformRunPolicy) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(cl, func(a, b infrav1.ClusterTerraformRunPolicy) int { return strings.Compare(a.Name, b.Name) })
	var out []Policy
	for _, p := range ns {
		out = append(out, Policy{Ref: infrav1.PolicyRef{Kind: KindNamespaced, Name: p.Name, Generation: p.Generation, UID: string(p.UID)}, Approval: p.Spec.Approval})
	}
	for _, p := range cl {
		if sel := p.Spec.NamespaceSelector; sel != nil && nsLabels != nil {
			if s, err := metav1.LabelSelectorAsSelector(sel); err == nil && !s.Matches(nsLabels) {
				continue
			}
		}
		out = append(out, Policy{Ref: infrav1.PolicyRef{Kind: KindCluster, Name: p.Name, Generation: p.Generation, UID: string(p.UID)}, Approval: p.Spec.Approval})
	}
	return out
}

// NeedsLabels says whether Select needs the namespace's labels: a cluster
// policy selects namespaces.
func NeedsLabels(cl []infrav1.ClusterTerraformRunPolicy) bool {
	return slices.ContainsFunc(cl, func(p infrav1.ClusterTerraformRunPolicy) bool { return p.Spec.NamespaceSelector != nil })
}
