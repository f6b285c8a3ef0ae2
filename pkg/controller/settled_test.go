package controller

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

// recordedCache stands for the settled cache: its informer for a kind has
// synced or not; a read of it is counted, and until the informer syncs it
// blocks until the caller gives up, as controller-runtime's cache does.
type recordedCache struct {
	client.Reader
	synced        bool
	reads, blocks int
}

func (c *recordedCache) GetInformer(_ context.Context, _ client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	o := cache.InformerGetOptions{}
	for _, f := range opts {
		f(&o)
	}
	if o.BlockUntilSynced == nil || *o.BlockUntilSynced {
		// A blocking GetInformer would hold the pass just as a read does.
		return nil, context.DeadlineExceeded
	}
	return syncedInformer{synced: c.synced}, nil
}

func (c *recordedCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if !c.synced {
		c.blocks++
		<-ctx.Done()
		return ctx.Err()
	}
	c.reads++
	return c.Reader.Get(ctx, key, obj, opts...)
}

func (c *recordedCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if !c.synced {
		c.blocks++
		<-ctx.Done()
		return ctx.Err()
	}
	c.reads++
	return c.Reader.List(ctx, list, opts...)
}

type syncedInformer struct {
	cache.Informer
	synced bool
}

func (i syncedInformer) HasSynced() bool { return i.synced }

// A pass reads settled children from the API server while the recorded
// cache's informer for their kind has not synced, and from the cache once
// it has: it never waits on the informer.
func TestRecordedChildrenAreReadWithoutWaitingForTheCache(t *testing.T) {
	f := &fakeEngine{}
	run := aRun("a")
	r0, _ := newReconciler(t, f)
	run = withRun(r0, run, 1, infrav1.RunSucceeded, infrav1.RunApply)
	child := childOf(t, run, infrav1.RunApply, 1, run.Status.Run.SpecHash)
	child.Labels[infrav1.SettledLabel] = "true"
	r, c := newReconciler(t, f, child)

	for _, synced := range []bool{false, true} {
		rc := &recordedCache{Reader: c, synced: synced}
		r.Settled = rc
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := time.Now()
		taken, err := r.settledChild(ctx, run.Namespace, f, child.Name)
		if err != nil || !taken {
			t.Fatalf("synced=%v: settledChild = %v, %v; want the number taken by the recorded child", synced, taken, err)
		}
		listed, err := r.listSettled(ctx, run, f)
		cancel()
		if err != nil || len(listed) != 1 || listed[0].GetName() != child.Name {
			t.Fatalf("synced=%v: listSettled = %v, %v; want %s", synced, listed, err, child.Name)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("synced=%v: the reads took %s: they waited on the cache", synced, d)
		}
		if rc.blocks != 0 {
			t.Errorf("synced=%v: %d reads waited on an informer that had not synced", synced, rc.blocks)
		}
		if want := map[bool]int{false: 0, true: 2}[synced]; rc.reads != want {
			t.Errorf("synced=%v: %d reads from the settled cache, want %d", synced, rc.reads, want)
		}
	}
}

// stepsEngine is a fakeEngine whose children have one step pod each: a
// child reads as finished once its pod is in the view, and as waiting to
// read it before (as the Job engine's children do for a while).
type stepsEngine struct{ *fakeEngine }

const stepOfLabel = "test.opr8r.io/step-of"

func (stepsEngine) RelatedTypes() []client.Object { return []client.Object{&corev1.Pod{}} }

func (stepsEngine) Related(ctx context.Context, c client.Reader, child client.Object) ([]client.Object, error) {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(child.GetNamespace()), client.MatchingLabels{stepOfLabel: child.GetName()}); err != nil {
		return nil, err
	}
	var out []client.Object
	for i := range pods.Items {
		out = append(out, &pods.Items[i])
	}
	return out, nil
}

func (stepsEngine) Observe(_ client.Object, related []client.Object, _ time.Time) (engine.Progress, error) {
	if len(related) == 0 {
		return engine.Progress{Phase: infrav1.RunRunning, Message: "waiting to read the pod of step apply"}, nil
	}
	now := metav1.NewTime(t0)
	return engine.Progress{Phase: infrav1.RunSucceeded, Finished: true, FinishedAt: &now}, nil
}

// A pass cut short while labelling a finished child recorded leaves its
// step pod labelled (out of the cache) and the child not. The next passes
// read the child's steps from the API server: the child is labelled, and
// the run's next run (here the destroy of a deleted TerraformRun) starts
// without waiting for a child that reads as still running.
func TestAChildLabelledHalfWayIsStillFinished(t *testing.T) {
	e := stepsEngine{&fakeEngine{}}
	run := aRun("a")
	r0, _ := newReconciler(t, e)
	run = withRun(r0, run, 1, infrav1.RunSucceeded, infrav1.RunApply)
	child := childOf(t, run, infrav1.RunApply, 1, run.Status.Run.SpecHash)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a-1-apply", Namespace: run.Namespace, Labels: map[string]string{
		stepOfLabel: child.Name, infrav1.SettledLabel: "true",
	}}}
	setup := func() (*TerraformRunReconciler, client.Client) {
		// The cache holds no recorded object; the API server has them all.
		r, cached := newReconciler(t, e, child.DeepCopy(), run.DeepCopy())
		_, api := newReconciler(t, e, child.DeepCopy(), run.DeepCopy(), pod.DeepCopy())
		r.APIReader = api
		return r, cached
	}

	t.Run("the child is labelled settled", func(t *testing.T) {
		r, cached := setup()
		if _, _, err := runSub(r, run.DeepCopy(), r.reconcileChildren); err != nil {
			t.Fatal(err)
		}
		j := &batchv1.Job{}
		if err := cached.Get(ctx(), client.ObjectKeyFromObject(child), j); err != nil {
			t.Fatal(err)
		}
		if !isSettled(j) {
			t.Errorf("child labels %v: not labelled settled", j.Labels)
		}
	})

	t.Run("the next run does not wait for it", func(t *testing.T) {
		r, cached := setup()
		st := r.newPassState(run)
		res, err := r.startRun(ctx(), run, st, e, newRun{typ: infrav1.RunDestroy, trigger: infrav1.TriggerDeletion})
		if err != nil {
			t.Fatal(err)
		}
		if run.Status.Run.ID != "a-destroy-2" || res.RequeueAfter != 0 {
			t.Fatalf("status.run %s, requeue %s: want destroy run a-destroy-2 started (%v)", run.Status.Run.ID, res.RequeueAfter, run.Status.Conditions)
		}
		j := &batchv1.Job{}
		if err := cached.Get(ctx(), client.ObjectKey{Namespace: run.Namespace, Name: "a-destroy-2"}, j); err != nil {
			t.Fatalf("destroy child: %v", err)
		}
	})
}

// cacheView stands for the manager's cache: it leaves out recorded
// objects, so an object is gone from it as soon as it is labelled.
type cacheView struct{ client.Client }

func (c cacheView) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := c.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if isSettled(obj) {
		return apierrors.NewNotFound(schema.GroupResource{}, key.Name)
	}
	return nil
}

func (c cacheView) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := c.Client.List(ctx, list, opts...); err != nil {
		return err
	}
	items, err := apimeta.ExtractList(list)
	if err != nil {
		return err
	}
	var kept []runtime.Object
	for _, it := range items {
		if !isSettled(it.(client.Object)) {
			kept = append(kept, it)
		}
	}
	return apimeta.SetList(list, kept)
}

// emptyReader is a settled cache that has not seen a label yet.
type emptyReader struct{ client.Reader }

func (emptyReader) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// A run with ttlAfterFinished 0s: the pass that labels its finished child
// recorded deletes it too. Its step objects have left the cache with their
// label and the settled cache has not seen the child's yet, so the child
// must not be observed again from the cache, which reads it as waiting for
// its steps: that pass skipped it and asked for no other, and the child
// stayed until something else woke the run (the envtest spec, once).
func TestTTLZeroDeletesTheChildItLabels(t *testing.T) {
	e := stepsEngine{&fakeEngine{}}
	run := aRun("a")
	run.Spec.History.TTLAfterFinished = &metav1.Duration{}
	r0, _ := newReconciler(t, e)
	run = withRun(r0, run, 1, infrav1.RunSucceeded, infrav1.RunApply)
	done := metav1.NewTime(t0.Add(-time.Second))
	run.Status.Run.FinishedAt = &done
	child := childOf(t, run, infrav1.RunApply, 1, run.Status.Run.SpecHash)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a-1-apply", Namespace: run.Namespace, Labels: map[string]string{stepOfLabel: child.Name}}}
	r, api := newReconciler(t, e, child, run.DeepCopy(), pod)
	r.Client = cacheView{api}
	r.Settled = emptyReader{api}

	_, res, err := runSub(r, run.DeepCopy(), r.reconcileChildren)
	if err != nil {
		t.Fatal(err)
	}
	err = api.Get(ctx(), client.ObjectKeyFromObject(child), &batchv1.Job{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("child a-1: %v, requeue %s; want it deleted in the pass that labelled it", err, res.RequeueAfter)
	}

	// A child whose steps cannot be read even from the API server is kept,
	// and looked at again soon: no pass leaves it without a next one.
	r, api = newReconciler(t, e, childOf(t, run, infrav1.RunApply, 1, run.Status.Run.SpecHash), run.DeepCopy())
	r.Client = cacheView{api}
	r.Settled = emptyReader{api}
	_, res, err = runSub(r, run.DeepCopy(), r.reconcileChildren)
	if err != nil {
		t.Fatal(err)
	}
	if err := api.Get(ctx(), client.ObjectKeyFromObject(child), &batchv1.Job{}); err != nil {
		t.Errorf("child a-1 without its step pod: %v; want it kept", err)
	}
	if res.RequeueAfter == 0 || res.RequeueAfter > unfinishedRetry {
		t.Errorf("child a-1 without its step pod: requeue %s, want within %s", res.RequeueAfter, unfinishedRetry)
	}
}
