package controller

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"

	"github.com/opr8r/opr8r/pkg/results"

	"github.com/opr8r/opr8r/pkg/names"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/pipeline"
)

// projectOutputs writes the user's outputs Secret from the raw outputs Secret
// of a child, and lists the keys (never values) in status. Sets nothing on
// success; a failure is returned and retried, so outputs are never lost.
func (r *TerraformRunReconciler) projectOutputs(ctx context.Context, run, eff *infrav1.TerraformRun, child string) error {
	raw := &corev1.Secret{}
	key := types.NamespacedName{Namespace: run.Namespace, Name: names.RawOutputsSecretName(child)}
	if err := r.Get(ctx, key, raw); err != nil {
		if !apierrors.IsNotFound(err) {
			return generic("ReadOutputs", err, "reading outputs of run %s", child)
		}
		if err := r.APIReader.Get(ctx, key, raw); err != nil {
			return generic("ReadOutputs", err, "reading outputs of run %s", child)
		}
	}
	outs, err := results.Outputs(eff.Spec.Outputs, raw.Data[results.RawOutputsKey])
	if err != nil {
		return &StallingError{Reason: infrav1.ReasonOutputsFailed, Err: err}
	}
	data := map[string][]byte{}
	keys := make([]string, 0, len(outs))
	var sensitive []string
	for _, o := range outs {
		data[o.Key] = o.Value
		keys = append(keys, o.Key)
		if o.Sensitive {
			sensitive = append(sensitive, o.Key)
		}
	}
	name := names.OutputsSecretName(eff)
	digest, err := r.writeOutputsSecret(ctx, run, name, data)
	if err != nil {
		return err
	}
	run.Status.Outputs = keys
	run.Status.SensitiveOutputs = sensitive
	run.Status.OutputsSecretName = name
	run.Status.OutputsDigest = digest
	return nil
}

// OutputsDigest is status.outputsDigest of an outputs Secret's data: an
// HMAC-SHA256 under key of every key and value, sorted by key. Unlike a
// hash salted with something public (the uid), it lets no one who lacks the
// key test a guessed value against it; the key is kept on the Secret, so
// only those who may read the values may read it.
func OutputsDigest(key []byte, data map[string][]byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("opr8r outputs v1\x00"))
	for _, k := range slices.Sorted(maps.Keys(data)) {
		fmt.Fprintf(mac, "%s\x00%d\x00", k, len(data[k]))
		mac.Write(data[k])
	}
	return "hmac-sha256:" + hex.EncodeToString(mac.Sum(nil))
}

// digestKey is the outputs digest key kept on a Secret, or nil.
func digestKey(s *corev1.Secret) []byte {
	k, err := hex.DecodeString(s.Annotations[infrav1.OutputsDigestKeyAnnotation])
	if err != nil || len(k) < 16 {
		return nil
	}
	return k
}

// newDigestKey is a fresh random outputs digest key, hex encoded.
func newDigestKey() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// writeOutputsSecret creates or updates the outputs Secret, owned by the run,
// and returns the outputs digest. A Secret of that name that opr8r does not
// own is never overwritten. The digest key is made with the Secret and kept
// as long as it exists. Every API error is returned as a GenericError that
// names the Secret.
func (r *TerraformRunReconciler) writeOutputsSecret(ctx context.Context, run *infrav1.TerraformRun, name string, data map[string][]byte) (string, error) {
	want := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: run.Namespace, Labels: map[string]string{
			infrav1.ManagedByLabel: infrav1.ManagedByValue,
			infrav1.RunNameLabel:   run.Name,
			infrav1.ComponentLabel: infrav1.ComponentOutputs,
		}},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
	if shard := pipeline.Shard(run); shard != "" {
		want.Labels[infrav1.ShardLabel] = shard
	}
	if err := controllerutil.SetControllerReference(run, want, r.Scheme()); err != nil {
		return "", generic("WriteOutputs", err, "owning Secret %s", name)
	}
	got := &corev1.Secret{}
	err := r.Get(ctx, client.ObjectKeyFromObject(want), got)
	if apierrors.IsNotFound(err) {
		created, cerr := r.createOutputsSecret(ctx, run, want)
		if cerr != nil {
			return "", cerr
		}
		if created {
			return OutputsDigest(digestKey(want), data), nil
		}
		// The cache lags, or the Secret is not ours (not labelled, so not
		// cached): read it directly to tell which.
		err = r.APIReader.Get(ctx, client.ObjectKeyFromObject(want), got)
	}
	if err != nil {
		return "", generic("ReadOutputs", err, "reading Secret %s", name)
	}
	return r.updateOutputsSecret(ctx, run, got, want)
}

// createOutputsSecret creates the outputs Secret with a new digest key; it
// reports false, with no error, when a Secret of that name exists.
func (r *TerraformRunReconciler) createOutputsSecret(ctx context.Context, run *infrav1.TerraformRun, want *corev1.Secret) (bool, error) {
	key, err := newDigestKey()
	if err != nil {
		return false, generic("WriteOutputs", err, "making the digest key of Secret %s", want.Name)
	}
	want.Annotations = map[string]string{infrav1.OutputsDigestKeyAnnotation: key}
	switch err := r.Create(ctx, want); {
	case apierrors.IsAlreadyExists(err):
		return false, nil
	case err != nil:
		return false, generic("WriteOutputs", err, "creating Secret %s", want.Name)
	}
	r.event(run, "Normal", "OutputsWritten", "Outputs", fmt.Sprintf("wrote %d outputs to Secret %s", len(want.Data), want.Name))
	return true, nil
}

// updateOutputsSecret brings an existing outputs Secret (got) to want,
// unless it is not the run's, and returns the outputs digest.
func (r *TerraformRunReconciler) updateOutputsSecret(ctx context.Context, run *infrav1.TerraformRun, got, want *corev1.Secret) (string, error) {
	earlier := earlierIncarnation(got, run)
	if !metav1.IsControlledBy(got, run) && !earlier {
		return "", stalling(infrav1.ReasonOutputsFailed, "Secret %s is not owned by this TerraformRun; set spec.outputs.secretName to another name", got.Name)
	}
	key := digestKey(got)
	if !earlier && key != nil && apiequality.Semantic.DeepEqual(got.Data, want.Data) && labelsContain(got.Labels, want.Labels) {
		return OutputsDigest(key, want.Data), nil
	}
	if earlier {
		// A TerraformRun of this name was deleted and created again before
		// the garbage collector removed its outputs: they are this one's now.
		got.OwnerReferences = want.OwnerReferences
	}
	if key == nil || earlier {
		hexKey, err := newDigestKey()
		if err != nil {
			return "", generic("WriteOutputs", err, "making the digest key of Secret %s", got.Name)
		}
		if got.Annotations == nil {
			got.Annotations = map[string]string{}
		}
		got.Annotations[infrav1.OutputsDigestKeyAnnotation] = hexKey
		key = digestKey(got)
	}
	restored := !apiequality.Semantic.DeepEqual(got.Data, want.Data)
	got.Data = want.Data
	if got.Labels == nil {
		got.Labels = map[string]string{}
	}
	maps.Copy(got.Labels, want.Labels)
	if err := r.Update(ctx, got); err != nil {
		return "", generic("WriteOutputs", err, "updating Secret %s", got.Name)
	}
	if restored {
		r.event(run, "Normal", "OutputsWritten", "Outputs", fmt.Sprintf("restored %d outputs in Secret %s", len(want.Data), got.Name))
	}
	return OutputsDigest(key, want.Data), nil
}

// reconcileOutputs rewrites the outputs Secret of the latest successful run
// if a person edited or deleted it, as long as that run's raw outputs still
// exist. Sets Ready False (OutputsFailed) when the outputs can't be written.
func (r *TerraformRunReconciler) reconcileOutputs(ctx context.Context, run *infrav1.TerraformRun, st *passState) (ctrl.Result, error) {
	cur := run.Status.Run
	if st.active || st.finished || cur == nil || cur.Type != infrav1.RunApply || cur.Phase != infrav1.RunSucceeded {
		return ctrl.Result{}, nil
	}
	if _, _, want := r.wantRun(run, st); want {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, r.restoreOutputs(ctx, run, st.eff)
}

// restoreOutputs rewrites the outputs Secret from the latest run's raw
// outputs, when they still exist.
func (r *TerraformRunReconciler) restoreOutputs(ctx context.Context, run, eff *infrav1.TerraformRun) error {
	if run.Status.OutputsSecretName == "" {
		return nil
	}
	raw := &corev1.Secret{}
	err := r.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: names.RawOutputsSecretName(run.Status.Run.ID)}, raw)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return generic("ReadOutputs", err, "reading raw outputs of run %s", run.Status.Run.ID)
	}
	return r.projectOutputs(ctx, run, eff, run.Status.Run.ID)
}

func labelsContain(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// earlierIncarnation says whether obj is controlled by a TerraformRun of the
// same name as run that no longer exists (another uid): opr8r's own object
// from before the TerraformRun was deleted and created again.
func earlierIncarnation(obj metav1.Object, run *infrav1.TerraformRun) bool {
	c := metav1.GetControllerOf(obj)
	return c != nil && c.Kind == "TerraformRun" && c.Name == run.Name && c.UID != run.UID &&
		obj.GetLabels()[infrav1.ManagedByLabel] == infrav1.ManagedByValue
}
