package governance

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/gate"
)

// Readers are where Governing reads: the policies, and the namespace's
// labels (the manager reads those around its cache).
type Readers struct {
	Policies   client.Reader
	Namespaces client.Reader
	// Missing, when set, is told of the cluster policies or the labels
	// that could not be read, and what Governing does without them, and
	// Governing goes on (kubectl tfrun policy test: without the labels
	// every cluster policy is taken, which can only add rules); unset,
	// Governing fails.
	Missing func(what, without string, err error)
}

// Governing lists the policies that govern the runs of namespace ns, as
// the manager combines them (gate.Select): the manager and kubectl tfrun
// policy test read them here, so both see the same.
func Governing(ctx context.Context, rd Readers, ns string) ([]gate.Policy, error) {
	var nsList infrav1.TerraformRunPolicyList
	if err := rd.Policies.List(ctx, &nsList, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("reading the TerraformRunPolicies of namespace %s, which govern its runs: %w", ns, err)
	}
	var clList infrav1.ClusterTerraformRunPolicyList
	if err := rd.Policies.List(ctx, &clList); err != nil {
		if rd.Missing == nil {
			return nil, fmt.Errorf("listing the ClusterTerraformRunPolicies: %w", err)
		}
		rd.Missing("the ClusterTerraformRunPolicies", "without them", err)
	}
	var nsLabels labels.Set
	if gate.NeedsLabels(clList.Items) {
		var n corev1.Namespace
		if err := rd.Namespaces.Get(ctx, types.NamespacedName{Name: ns}, &n); err != nil {
			if rd.Missing == nil {
				return nil, fmt.Errorf("reading namespace %s's labels for the ClusterTerraformRunPolicies' namespaceSelector: %w", ns, err)
			}
			rd.Missing("namespace "+ns+"'s labels", "with every ClusterTerraformRunPolicy, selected or not", err)
		} else {
			nsLabels = labels.Set(n.Labels)
			if nsLabels == nil {
				nsLabels = labels.Set{}
			}
		}
	} else {
		nsLabels = labels.Set{}
	}
	return gate.Select(nsList.Items, clList.Items, nsLabels), nil
}
