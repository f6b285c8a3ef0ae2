package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

func TestGuardList(t *testing.T) {
	r, c := newReconciler(t, &fakeEngine{})
	list := func() string {
		cm := &corev1.ConfigMap{}
		if err := c.Get(ctx(), client.ObjectKey{Namespace: "ns", Name: GuardConfigMapName}, cm); err != nil {
			t.Fatal(err)
		}
		return cm.Data[GuardChildrenKey]
	}
	for _, child := range []string{"web-2", "net-1", "web-2", "net-destroy-3", "netapp-1"} {
		if err := r.guardChild(ctx(), "ns", child, "deployer"); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := list(), "net-1\nnet-destroy-3\nnetapp-1\nweb-2"; got != want {
		t.Fatalf("guard list %q, want %q (sorted, each once)", got, want)
	}
	cm := &corev1.ConfigMap{}
	_ = c.Get(ctx(), client.ObjectKey{Namespace: "ns", Name: GuardConfigMapName}, cm)
	if got, want := cm.Data[GuardRunnersKey], "deployer\nopr8r-check\nopr8r-runner"; got != want {
		t.Fatalf("runner service accounts %q, want %q (the children's, the default runner's, the checks')", got, want)
	}
	if err := r.unguardChildren(ctx(), "ns", func(n string) bool { return n == "web-2" }); err != nil {
		t.Fatal(err)
	}
	if err := r.unguardChildren(ctx(), "ns", func(n string) bool { return childOfRun("net", n) }); err != nil {
		t.Fatal(err)
	}
	if got := list(); got != "netapp-1" {
		t.Fatalf("guard list %q after dropping web-2 and net's children, want netapp-1", got)
	}
	_ = c.Get(ctx(), client.ObjectKey{Namespace: "ns", Name: GuardConfigMapName}, cm)
	if cm.Labels[infrav1.ManagedByLabel] != infrav1.ManagedByValue {
		t.Errorf("the guard list is not labelled as opr8r's: %v", cm.Labels)
	}
}

func TestChildOfRun(t *testing.T) {
	for name, want := range map[string]bool{
		"net-1": true, "net-destroy-12": true, "net-drift-3": true, "net-plan-4": true,
		"net-a-1": false, "netapp-1": false, "net-": false, "net-1-plan": false, "other-1": false,
	} {
		if got := childOfRun("net", name); got != want {
			t.Errorf("childOfRun(net, %s) = %v, want %v", name, got, want)
		}
	}
}
