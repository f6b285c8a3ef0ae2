package receiver

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// Caps are how many previews a receiver allows, per tracked run and per
// namespace.
type Caps struct {
	PerRun, PerNamespace int
}

// CapsOf are a receiver's caps (spec.previews.maxPerRun and
// maxPerNamespace), their defaults where unset.
func CapsOf(p *infrav1.ReceiverPreviews) Caps {
	c := Caps{PerRun: infrav1.DefaultMaxPreviewsPerRun, PerNamespace: infrav1.DefaultMaxPreviewsPerNamespace}
	if p != nil && p.MaxPerRun > 0 {
		c.PerRun = int(p.MaxPerRun)
	}
	if p != nil && p.MaxPerNamespace > 0 {
		c.PerNamespace = int(p.MaxPerNamespace)
	}
	return c
}

// OverCap says why one more preview of run would go over the caps, given
// the previews there are of run and in the namespace ("" when it would
// not).
func OverCap(c Caps, run string, ofRun, inNamespace int) string {
	switch {
	case ofRun >= c.PerRun:
		return fmt.Sprintf("not previewed: %s has %d previews, the receiver's cap (spec.previews.maxPerRun %d)", run, ofRun, c.PerRun)
	case inNamespace >= c.PerNamespace:
		return fmt.Sprintf("not previewed: the namespace has %d previews, the receiver's cap (spec.previews.maxPerNamespace %d)", inNamespace, c.PerNamespace)
	}
	return ""
}

// checkCaps counts the previews (TerraformRuns with the preview label) of
// run and of its namespace; over a cap, the pull request gets a commit
// status saying why, and the answer is a skipError (which an Event
// reports).
func (s *Server) checkCaps(ctx context.Context, rcv *infrav1.TerraformRunReceiver, run *infrav1.TerraformRun, name string, pv Preview) error {
	ofRun, inNamespace, err := s.countPreviews(ctx, run)
	if err != nil {
		return err
	}
	why := OverCap(CapsOf(rcv.Spec.Previews), run.Name, ofRun, inNamespace)
	if why == "" {
		return nil
	}
	if rep, err := s.reporter(ctx, rcv); err == nil {
		_ = setStatus(ctx, rep, pv, statusContext(run.Namespace, name), "error", why, "")
	}
	return &skipError{event: "PreviewCapped", reason: why}
}

// countPreviews counts the previews of run and of its namespace, from the
// API server, a page at a time.
func (s *Server) countPreviews(ctx context.Context, run *infrav1.TerraformRun) (ofRun, inNamespace int, err error) {
	req, _ := labels.NewRequirement(infrav1.PreviewOfLabel, selection.Exists, nil)
	opts := []client.ListOption{client.InNamespace(run.Namespace), client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*req)}, client.Limit(500)}
	for cont := ""; ; {
		var runs infrav1.TerraformRunList
		if err := s.API.List(ctx, &runs, append(opts, client.Continue(cont))...); err != nil {
			return 0, 0, err
		}
		for i := range runs.Items {
			if p := &runs.Items[i]; p.DeletionTimestamp == nil {
				inNamespace++
				if p.Labels[infrav1.PreviewOfLabel] == run.Name {
					ofRun++
				}
			}
		}
		if cont = runs.Continue; cont == "" {
			return ofRun, inNamespace, nil
		}
	}
}
