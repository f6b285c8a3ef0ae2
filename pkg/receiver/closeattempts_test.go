package receiver

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// TestTenantCloseAttemptsAnnotationHoldsNoDeletion: the count of tries to tell
// the forge a preview closed (infra.opr8r.io/preview-close-attempts) is an
// annotation on the preview, which a tenant with edit (or opr8r-editor)
// may write: opr8r-previews guards only planOnly, the label and the
// preview annotation. Set to a large negative number before the tracked
// run is deleted (or the namespace), with the forge failing (the
// receiver's apiURL is the tenant's to change, to a server answering 502),
// the manager keeps calling the forge and patching the preview, each
// patch waking it again at once (RequeueAfter is negative): the deletion
// is held and the shared manager's preview worker spins. At most
// PreviewCloseAttempts tries, whatever the annotation says.
func TestTenantCloseAttemptsAnnotationHoldsNoDeletion(t *testing.T) {
	down := giteaRoutes()
	down["POST /api/v1/repos/octocat/Hello-World/statuses/"+sha] = []answerOf{{code: 502}}
	forge := newFakeForge(t, down)
	p := sealedPreview(t)
	p.Annotations[infrav1.PreviewCommentAnnotation] = commentRef(testSeals, p, 99)
	p.Annotations[infrav1.PreviewCloseAttemptsAnnotation] = "-1000000" // the tenant's
	c := testClient(t, p, testReceiver(forge.srv.URL, nil))
	if err := c.Delete(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	r := &PreviewReporter{Client: c, API: c, HTTP: forge.srv.Client(), Seals: testSeals}
	key := types.NamespacedName{Namespace: "team-a", Name: "net-pr7"}
	tries := 0
	for ; tries < 10; tries++ {
		if err := c.Get(context.Background(), key, &infrav1.TerraformRun{}); apierrors.IsNotFound(err) {
			break
		}
		res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key})
		if err != nil {
			t.Fatal(err)
		}
		if res.RequeueAfter < 0 {
			t.Errorf("reconcile %d asks to requeue after %s", tries, res.RequeueAfter)
		}
	}
	if tries > PreviewCloseAttempts {
		t.Errorf("the preview still held after %d reconciles (the tenant's count of tries), want at most %d", tries, PreviewCloseAttempts)
	}
}
