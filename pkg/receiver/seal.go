package receiver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

// Seal domains: a MAC of one verifies in no other.
const (
	previewDomain = "preview"
	commentDomain = "preview-comment"
)

// previewParts are what a preview's seal covers: its namespace and name,
// the receiver, the pull request, the repository and head commit it
// reports on, the tracked run (name and UID, from its owner reference)
// and a hash of its spec. ok is false when the preview names no tracked
// run it is owned by.
func previewParts(run *infrav1.TerraformRun, pv Preview) ([]string, bool) {
	tracked := run.Labels[infrav1.PreviewOfLabel]
	var uid types.UID
	for _, r := range run.OwnerReferences {
		if r.Kind == "TerraformRun" && r.Name == tracked {
			uid = r.UID
		}
	}
	if tracked == "" || uid == "" {
		return nil, false
	}
	spec, err := json.Marshal(run.Spec)
	if err != nil {
		return nil, false
	}
	h := sha256.Sum256(spec)
	return []string{run.Namespace, run.Name, pv.Receiver, string(pv.Type), strconv.FormatInt(pv.Number, 10),
		pv.Owner, pv.Repo, pv.Head, tracked, string(uid), hex.EncodeToString(h[:])}, true
}

// sealPreview is the seal of a preview as it is now.
func sealPreview(seals engine.Seals, run *infrav1.TerraformRun, pv Preview) (string, error) {
	parts, ok := previewParts(run, pv)
	if !ok {
		return "", fmt.Errorf("preview %s is owned by no TerraformRun %q", run.Name, run.Labels[infrav1.PreviewOfLabel])
	}
	return seals.MAC(previewDomain, parts...)
}

// IsManagersPreview says whether run is a preview the manager made or
// moved itself, unchanged since: its seal (PreviewSealAnnotation)
// verifies under the manager's key over its annotation, labels, owner and
// spec. Anything else that looks like a preview (the label, an annotation
// naming a receiver) was written by someone else, and the manager
// reports nothing of it and gives it nothing a preview gets.
func IsManagersPreview(seals engine.Seals, run *infrav1.TerraformRun) bool {
	pv, ok := previewOf(run)
	if !ok {
		return false
	}
	parts, ok := previewParts(run, pv)
	return ok && seals.VerifyMAC(run.Annotations[infrav1.PreviewSealAnnotation], previewDomain, parts...)
}

// previewOf reads a preview's annotation; ok is false when it has none,
// or its pull request is not its label's.
func previewOf(run *infrav1.TerraformRun) (Preview, bool) {
	var pv Preview
	if err := json.Unmarshal([]byte(run.Annotations[infrav1.PreviewAnnotation]), &pv); err != nil {
		return Preview{}, false
	}
	return pv, pv.Number > 0 && run.Labels[infrav1.PullRequestLabel] == strconv.FormatInt(pv.Number, 10)
}

// seal writes the seal of the preview as the API server last returned it,
// only if nobody changed it since (the patch carries its
// resourceVersion).
func (s *Server) seal(ctx context.Context, p *infrav1.TerraformRun, pv Preview) error {
	mac, err := sealPreview(s.Seals, p, pv)
	if err != nil {
		return err
	}
	want, _ := previewParts(p, pv)
	for range 3 {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": p.ResourceVersion,
			"annotations":     map[string]string{infrav1.PreviewSealAnnotation: mac},
		}})
		err := s.Writer.Patch(ctx, p, client.RawPatch(types.MergePatchType, patch))
		if !apierrors.IsConflict(err) {
			if err != nil {
				return fmt.Errorf("sealing preview %s: %w", p.Name, err)
			}
			return nil
		}
		// Changed since (the run's controller adds its finalizer at
		// once): sealed only if what the seal covers is still what the
		// manager wrote.
		fresh := &infrav1.TerraformRun{}
		if err := s.API.Get(ctx, client.ObjectKeyFromObject(p), fresh); err != nil {
			return fmt.Errorf("sealing preview %s: %w", p.Name, err)
		}
		if got, ok := previewParts(fresh, pv); !ok || !slices.Equal(got, want) ||
			fresh.Annotations[infrav1.PreviewAnnotation] != p.Annotations[infrav1.PreviewAnnotation] {
			return fmt.Errorf("sealing preview %s: someone else changed it since the manager wrote it", p.Name)
		}
		p = fresh
	}
	return fmt.Errorf("sealing preview %s: it keeps changing", p.Name)
}

// commentRef is the value of PreviewCommentAnnotation: the comment's id
// and its MAC, so that an id someone else wrote there is never edited.
func commentRef(seals engine.Seals, run *infrav1.TerraformRun, id int64) string {
	mac, err := seals.MAC(commentDomain, run.Namespace, run.Name, run.Labels[infrav1.PullRequestLabel], strconv.FormatInt(id, 10))
	if err != nil {
		return ""
	}
	return strconv.FormatInt(id, 10) + ":" + mac
}

// commentID is the comment's id recorded on a preview, 0 when none or
// when its MAC does not verify.
func commentID(seals engine.Seals, run *infrav1.TerraformRun) int64 {
	v := run.Annotations[infrav1.PreviewCommentAnnotation]
	idText, mac, ok := strings.Cut(v, ":")
	id, err := strconv.ParseInt(idText, 10, 64)
	if !ok || err != nil || id <= 0 ||
		!seals.VerifyMAC(mac, commentDomain, run.Namespace, run.Name, run.Labels[infrav1.PullRequestLabel], idText) {
		return 0
	}
	return id
}
