package stateapi_test

// Attacks on the state API through the API server, found by a security
// review: each failed before its fix.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/names"
)

// TestAStepMakesNoTokenSecret: the grant checks a created
// Secret's name, owners and labels, never its type or annotations. Module
// code (an opr8r-editor's, or a pull request's in a preview) creates its
// "own" Secret of type kubernetes.io/service-account-token for any
// service account of the namespace that is not a runner (a CI deployer, a
// tenant's app, default); the manager makes it, the tokens controller
// fills it with a non-expiring token of that account, and the step reads
// it back as its own Secret. opr8r-runner-credentials only refuses tokens
// of runner accounts. (envtest runs no tokens controller: the test shows
// the manager created the token Secret and handed it back.)
func TestAStepMakesNoTokenSecret(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	for _, who := range []struct {
		name, pod, child, role string
		run                    *infrav1.TerraformRun
	}{
		{"runner", "app-1-apply-t1", "app-1", "runner", w.app},
		{"preview (a pull request's code)", "app-pr7-plan-1-t1", "app-pr7-plan-1", "preview", w.preview},
	} {
		t.Run(who.name, func(t *testing.T) {
			c, _ := w.client(w.token(runnerSA, who.pod, who.run, who.child, who.role, ""))
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: who.child + "-tok",
				Annotations:     map[string]string{corev1.ServiceAccountNameKey: "tenant-app"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: infrav1.GroupVersion.String(), Kind: "TerraformRun", Name: who.run.Name, UID: who.run.UID}}},
				Type: corev1.SecretTypeServiceAccountToken}
			_, err := c.CoreV1().Secrets(w.ns).Create(ctx, s, metav1.CreateOptions{})
			if apierrors.IsForbidden(err) {
				return
			}
			got, gerr := c.CoreV1().Secrets(w.ns).Get(ctx, s.Name, metav1.GetOptions{})
			t.Fatalf("module code made the manager create a token Secret of service account tenant-app (create: %v; read back through the state API: type %v, %v)",
				err, typeOf(got), gerr)
		})
	}
}

func typeOf(s *corev1.Secret) corev1.SecretType {
	if s == nil {
		return ""
	}
	return s.Type
}

// TestMetadataIsReadAsTheAPIServerReadsIt: the state API reads a body's metadata
// with encoding/json, which matches keys case-insensitively (and lets the
// last of two keys win); the API server's decoder is case-sensitive. A
// body with the real "metadata" first and a decoy "Metadata" (or "name"
// and "Name" inside it) is decided on the decoy and created as the real:
// any name, no owner, another run's labels (a kept state of another run,
// which that run's next init pushes as its state; records of another
// run; a state Secret for a run that has none yet).
func TestMetadataIsReadAsTheAPIServerReadsIt(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	c, _ := w.client(w.token(runnerSA, "app-1-apply-s1", w.app, "app-1", "runner", ""))
	// Maps merge in encoding/json (the decoy's label value wins), slices
	// and strings are replaced.
	decoy := map[string]any{"name": "app-1-plan", "labels": map[string]string{"infra.opr8r.io/run": "app"}, "ownerReferences": []map[string]any{{"apiVersion": infrav1.GroupVersion.String(), "kind": "TerraformRun", "name": "app", "uid": string(w.app.UID)}}}
	real := map[string]any{"name": "evil-not-mine", "labels": map[string]string{"infra.opr8r.io/run": "app-pr7"}}
	body, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": real, "stringData": map[string]string{"x": "y"}})
	// encoding/json: the later "Metadata" overwrites; json.Marshal sorts
	// keys, so add it by hand after "metadata".
	d, _ := json.Marshal(decoy)
	body = append(body[:len(body)-1], []byte(fmt.Sprintf(`,"Metadata":%s}`, d))...)
	res := c.CoreV1().RESTClient().Post().Namespace(w.ns).Resource("secrets").SetHeader("Content-Type", "application/json").Body(body).Do(ctx)
	err := res.Error()
	t.Logf("create: %v", err)
	if apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) {
		return
	}
	s, gerr := admin.CoreV1().Secrets(w.ns).Get(ctx, "evil-not-mine", metav1.GetOptions{})
	if gerr == nil {
		t.Fatalf("the state API created Secret %s (owners %v, labels %v) for a body whose decoy metadata named app-1-plan (create: %v)", s.Name, s.OwnerReferences, s.Labels, err)
	}
	t.Logf("create answered %v; nothing made: %v", err, gerr)
}

// TestAnotherRunsAudienceIsRefused: spec.runner.identityToken.audience is
// any string (MinLength 1); only an optional runner policy restricts it.
// An author of run app-evil sets it to the state audience of run app,
// child app-evil (any name with app's prefix is a "child"): the kubelet
// mints the runner's token for that audience, bound to app-evil's pod,
// whose name (app-evil-1-...) begins with "app-evil-". The state API
// grants it app's runner role: app's state is read, rewritten, deleted.
// Here the token is minted by the test as the kubelet would.
func TestAnotherRunsAudienceIsRefused(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	must(t, admin.CoreV1().Secrets(w.ns).Delete(ctx, "db-password", metav1.DeleteOptions{}))
	_, err := admin.CoreV1().Secrets(w.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tfstate-default-app"},
		StringData: map[string]string{"tfstate": "app's state"}}, metav1.CreateOptions{})
	must(t, err)
	// The CRD refuses the audience now; the token is minted as the
	// kubelet would have for a run stored before.
	bad := w.app.DeepCopy()
	bad.Name, bad.ResourceVersion, bad.UID = "app-evil", "", ""
	bad.Spec.Runner.IdentityToken = &infrav1.IdentityToken{Audience: names.StateAudience(w.ns, "app", string(w.app.UID), "app-evil", "runner")}
	if err := runs.Create(ctx, bad); err == nil || !strings.Contains(err.Error(), "opr8r.io/") {
		t.Fatalf("a run asking for a state audience as its identity token was admitted: %v", err)
	}
	for _, child := range []string{"app-evil", "app-plan-1x"} {
		aud := names.StateAudience(w.ns, "app", string(w.app.UID), child, "runner")
		c, _ := w.client(w.token(runnerSA, child+"-1-plan-x1", w.app, "", "", aud))
		if _, err := c.CoreV1().Secrets(w.ns).Get(ctx, "tfstate-default-app", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("a pod of %s with app's state audience: %v", child, err)
		}
	}
	aud := names.StateAudience(w.ns, "app", string(w.app.UID), "app-evil", "runner")
	c, _ := w.client(w.token(runnerSA, "app-evil-2-plan-x1", w.app, "", "", aud))
	st, err := c.CoreV1().Secrets(w.ns).Get(ctx, "tfstate-default-app", metav1.GetOptions{})
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		return
	}
	must(t, err)
	derr := c.CoreV1().Secrets(w.ns).Delete(ctx, "tfstate-default-app", metav1.DeleteOptions{})
	t.Fatalf("a pod of run app-evil, with an identity token of audience %s, read run app's state (%q) and deleted it: %v", aud, st.Data["tfstate"], derr)
}
