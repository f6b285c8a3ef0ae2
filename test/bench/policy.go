package main

import (
	"context"
	"fmt"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// withoutFinalizerPolicy is P1b on a cluster without opr8r-finalizer (its
// binding deleted, as where MutatingAdmissionPolicy is not served): m runs
// started in the namespace nopolicy, and the manager's writes per run,
// counted from the audit log once their m children exist. The runs are
// then deleted (Retain: nothing to destroy) with their children, and the
// binding created again, acting before the next phase.
func withoutFinalizerPolicy(ctx context.Context, c client.Client, cfg *rest.Config, p enginePlayer, auditLog string, m int) (float64, error) {
	const ns, name = "nopolicy", "opr8r-finalizer"
	b := &admissionregistrationv1.MutatingAdmissionPolicyBinding{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, b); err != nil {
		return 0, err
	}
	saved := b.DeepCopy()
	if err := c.Delete(ctx, b); err != nil {
		return 0, err
	}
	if err := waitFinalizerPolicy(ctx, c, p, false); err != nil {
		return 0, err
	}
	before := settled(auditLog, countWrites)
	children, err := countChildren(ctx, cfg, p.gvr, ns, m)
	if err != nil {
		return 0, err
	}
	if err := parallel(m, func(i int) error {
		run := p.run(fmt.Sprintf("n%05d", i), ns).Retain().Obj()
		run.UID = ""
		return c.Create(ctx, run)
	}); err != nil {
		return 0, err
	}
	select {
	case err := <-children:
		if err != nil {
			return 0, err
		}
	case <-time.After(5 * time.Minute):
		return 0, fmt.Errorf("%d children not created within 5m", m)
	}
	perRun := float64(settled(auditLog, countWrites)-before) / float64(m)

	saved.ResourceVersion, saved.UID, saved.CreationTimestamp, saved.ManagedFields = "", "", metav1.Time{}, nil
	if err := c.Create(ctx, saved); err != nil {
		return 0, err
	}
	if err := waitFinalizerPolicy(ctx, c, p, true); err != nil {
		return 0, err
	}
	if err := parallel(m, func(i int) error {
		return client.IgnoreNotFound(c.Delete(ctx, &infrav1.TerraformRun{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%05d", i), Namespace: ns}}))
	}); err != nil {
		return 0, err
	}
	// No garbage collector runs in envtest: the children go by hand, once
	// their runs are gone.
	if err := waitFor(5*time.Minute, func() (bool, error) {
		time.Sleep(time.Second)
		l := &infrav1.TerraformRunList{}
		err := c.List(ctx, l, client.InNamespace(ns))
		return err == nil && len(l.Items) == 0, err
	}); err != nil {
		return 0, err
	}
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return 0, err
	}
	return perRun, mc.Resource(p.gvr).Namespace(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
}

// waitFinalizerPolicy waits until a dry-run TerraformRun is admitted with
// the finalizer (want) or without it.
func waitFinalizerPolicy(ctx context.Context, c client.Client, p enginePlayer, want bool) error {
	return waitFor(time.Minute, func() (bool, error) {
		time.Sleep(200 * time.Millisecond)
		run := p.run("policy-probe", "nopolicy").Obj()
		run.UID = ""
		if err := c.Create(ctx, run, client.DryRunAll); err != nil {
			return false, err
		}
		return (len(run.Finalizers) > 0) == want, nil
	})
}

// waitRecorded waits until the manager has labelled the n children of ns
// recorded: a metadata list every two seconds.
func waitRecorded(ctx context.Context, cfg *rest.Config, p enginePlayer, ns string, n int) error {
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return waitFor(10*time.Minute, func() (bool, error) {
		time.Sleep(2 * time.Second)
		l, err := mc.Resource(p.gvr).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: infrav1.SettledLabel + "=true"})
		if err != nil {
			return false, err
		}
		return len(l.Items) >= n, nil
	})
}
