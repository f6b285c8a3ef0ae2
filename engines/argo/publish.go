package argo

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/opr8r/opr8r/pkg/names"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/pipeline"
)

var _ engine.GatePublisher = Engine{}

// Annotations of a Workflow whose gate waits: the rule the admission policy
// opr8r-argo-resume judges a person's resume by (opr8r writes them), and
// who resumed (the API server stamps it; engines/argo/manifests/policy.yaml).
// Lists are newline-separated: user and group names may hold commas.
const (
	AnnoGatePrefix    = "infra.opr8r.io/gate-"
	AnnoGateDigest    = AnnoGatePrefix + "digest"
	AnnoGateUsers     = AnnoGatePrefix + "users"
	AnnoGateGroups    = AnnoGatePrefix + "groups"
	AnnoGateBarred    = AnnoGatePrefix + "barred"
	AnnoGateNeeded    = AnnoGatePrefix + "needed"
	AnnoGateDecidedBy = AnnoGatePrefix + "decided-by"
	AnnoGateGroupsOf  = AnnoGatePrefix + "decided-by-groups"
	anyone            = "*"
)

// gateAnnotations are the rule as annotations.
func gateAnnotations(p engine.GatePolicy) map[string]string {
	users := anyone
	if p.Users != nil {
		users = strings.Join(p.Users, "\n")
	}
	return map[string]string{
		AnnoGateDigest: p.Digest,
		AnnoGateUsers:  users,
		AnnoGateGroups: strings.Join(p.Groups, "\n"),
		AnnoGateBarred: strings.Join(p.Barred, "\n"),
		AnnoGateNeeded: strconv.Itoa(int(p.Needed)),
	}
}

// PublishGate implements engine.GatePublisher: a merge patch of the
// annotations, and of the waiting gate node's message (what the Argo UI
// shows first in the node's panel: the plan's summary and digest and how to
// decide), only where they differ from the child's.
func (Engine) PublishGate(ctx context.Context, c client.Client, obj client.Object, p engine.GatePolicy) error {
	wf, ok := obj.(*wfv1.Workflow)
	if !ok {
		return fmt.Errorf("argo: expected a Workflow, got %T", obj)
	}
	patch := map[string]any{}
	want := gateAnnotations(p)
	for k, v := range want {
		if have, ok := wf.Annotations[k]; !ok || have != v {
			patch["metadata"] = map[string]any{"annotations": want}
		}
	}
	if id, msg, ok := gateNodeMessage(wf, p.Digest); ok {
		patch["status"] = map[string]any{"nodes": map[string]any{id: map[string]any{"message": msg}}}
	}
	if len(patch) == 0 {
		return nil
	}
	raw, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	return c.Patch(ctx, wf, client.RawPatch(types.MergePatchType, raw))
}

// gateNodeMessage returns the id of the waiting gate node and the message
// it should carry, if that differs from its own. Compressed or offloaded
// node status is left alone (a patch of status.nodes would not reach it).
func gateNodeMessage(wf *wfv1.Workflow, digest string) (id, msg string, ok bool) {
	if wf.Status.CompressedNodes != "" || wf.Status.IsOffloadNodeStatus() || digest == "" {
		return "", "", false
	}
	for nid, n := range wf.Status.Nodes {
		if n.DisplayName != names.StepApprove || !n.IsActiveSuspendNode() {
			continue
		}
		summary := ""
		if n.Inputs != nil {
			for _, in := range n.Inputs.Parameters {
				if in.Name == paramSummary && in.Value != nil {
					summary = in.Value.String()
				}
			}
		}
		resume := fmt.Sprintf("RESUME this step with decision approve, or argo resume %s -n %s --node-field-selector displayName=%s", wf.Name, wf.Namespace, names.StepApprove)
		msg = pipeline.GateMessage(wf.Labels[infrav1.RunNameLabel], wf.Namespace, summary, digest, resume)
		return nid, msg, n.Message != msg
	}
	return "", "", false
}
