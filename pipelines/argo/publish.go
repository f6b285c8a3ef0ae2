package argo

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opr8r/opr8r/pkg/engine"
)

var _ engine.GatePublisher = Engine{}

// Annotations of a Workflow whose gate waits: the rule the admission policy
// opr8r-argo-resume judges a person's resume by (opr8r writes them), and
// who resumed (the API server stamps it; config/policy/argo-resume.yaml).
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
// annotations, only when they differ from the child's.
func (Engine) PublishGate(ctx context.Context, c client.Client, obj client.Object, p engine.GatePolicy) error {
	wf, ok := obj.(*wfv1.Workflow)
	if !ok {
		return fmt.Errorf("argo: expected a Workflow, got %T", obj)
	}
	want := gateAnnotations(p)
	same := true
	for k, v := range want {
		if have, ok := wf.Annotations[k]; !ok || have != v {
			same = false
		}
	}
	if same {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": want}})
	if err != nil {
		return err
	}
	return c.Patch(ctx, wf, client.RawPatch(types.MergePatchType, patch))
}
