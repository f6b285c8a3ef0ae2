package integration

import (
	"context"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// namespaceController is the identity kube-controller-manager's namespace
// controller deletes a namespace's content as (one DELETECOLLECTION per
// resource, with --use-service-account-credentials).
const namespaceController = "system:serviceaccount:kube-system:namespace-controller"

// celFailure is what the API server says when an admission policy's own
// expression failed, rather than refused the request on purpose.
func celFailure(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	for _, m := range []string{"no such key", "evaluation error", "failed to evaluate", "no such overload", "expression"} {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

// namespacedDeletable lists every namespaced resource the API server serves
// that takes DELETECOLLECTION, as the namespace controller finds them.
func namespacedDeletable(cfg *rest.Config) []schema.GroupVersionResource {
	GinkgoHelper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	lists, err := dc.ServerPreferredNamespacedResources()
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		Expect(err).NotTo(HaveOccurred())
	}
	var out []schema.GroupVersionResource
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		Expect(err).NotTo(HaveOccurred())
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !containsString(r.Verbs, "deletecollection") {
				continue
			}
			out = append(out, gv.WithResource(r.Name))
		}
	}
	return out
}

// Issue 49, 0: opr8r-runner-credentials read request.name in a match
// condition; the namespace controller's DELETECOLLECTION of ServiceAccounts
// has no name, the expression failed, and the policy failed closed: every
// namespace deleted while opr8r was installed stayed Terminating. The same
// held for opr8r-guard and opr8r-guard-writes (a DELETECOLLECTION's first
// admission request carries neither a name nor an object).
var _ = Describe("namespace deletion: no admission policy of opr8r's fails on a request without a name or an object", Ordered, func() {
	ctx := context.Background()
	const tenant = "nsdel-tenant"
	var ns string

	BeforeAll(func() {
		ns = newNamespace()
		tenantRoles(ns, tenant)
		By("a namespace with what opr8r guards in it: an active run's guard list, the runner service account, its Secrets, a kept state, a Lease, a pod of the run")
		Expect(k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: runnerSA, Namespace: ns}})).To(Succeed())
		Expect(k8sClient.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "opr8r-guard", Namespace: ns},
			Data: map[string]string{"children": "gone-1", "runnerServiceAccounts": runnerSA}})).To(Succeed())
		for _, s := range []*corev1.Secret{
			{ObjectMeta: metav1.ObjectMeta{Name: "gone-1-plan", Namespace: ns}},
			{ObjectMeta: metav1.ObjectMeta{Name: "gone-1-rec-0123456789-0", Namespace: ns, Labels: map[string]string{"infra.opr8r.io/component": "record",
				"infra.opr8r.io/run": "gone", "infra.opr8r.io/run-id": "gone-1", "infra.opr8r.io/step": "apply", "infra.opr8r.io/record-kind": "errored.tfstate"}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "tfstate-default-gone", Namespace: ns}},
		} {
			Expect(k8sClient.Create(ctx, s)).To(Succeed())
		}
		Expect(k8sClient.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "gone-1-inputs", Namespace: ns}})).To(Succeed())
		Expect(k8sClient.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "lock-tfstate-default-gone", Namespace: ns},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("x")}})).To(Succeed())
		Expect(k8sClient.Create(ctx, testPod(ns, "gone-1-plan-pod", runnerSA, labelled("infra.opr8r.io/run", "gone")))).To(Succeed())
	})

	It("lets a tenant's DELETECOLLECTION through the policies, which judge each object it deletes", func() {
		c := as(tenant)
		for _, obj := range []client.Object{&corev1.Secret{}, &corev1.ConfigMap{}, &corev1.ServiceAccount{}} {
			err := c.DeleteAllOf(ctx, obj, client.InNamespace(ns))
			Expect(celFailure(err)).To(BeFalse(), "a policy failed on the tenant's DELETECOLLECTION of %T: %v", obj, err)
		}
		By("what opr8r guards is still there: each object the collection named was refused on its own")
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "opr8r-guard"}, &corev1.ConfigMap{})).To(Succeed())
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: runnerSA}, &corev1.ServiceAccount{})).To(Succeed())
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "gone-1-plan"}, &corev1.Secret{})).To(Succeed())
	})

	It("lets the namespace controller delete every resource of the namespace, collection by collection", func() {
		cfg, _ := impersonating(namespaceController, nil)
		dyn, err := dynamic.NewForConfig(cfg)
		Expect(err).NotTo(HaveOccurred())
		resources := namespacedDeletable(cfg)
		Expect(resources).NotTo(BeEmpty())
		for _, gvr := range resources {
			err := dyn.Resource(gvr).Namespace(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
			if apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err) {
				continue
			}
			Expect(err).NotTo(HaveOccurred(), "the namespace controller's DELETECOLLECTION of %s", gvr)
		}
		By("nothing opr8r guards is left behind")
		for _, gvr := range []schema.GroupVersionResource{
			{Version: "v1", Resource: "serviceaccounts"}, {Version: "v1", Resource: "secrets"}, {Version: "v1", Resource: "configmaps"},
			{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}, {Version: "v1", Resource: "pods"},
		} {
			l, err := dyn.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
			Expect(err).NotTo(HaveOccurred())
			var left []string
			for _, it := range l.Items {
				if it.GetDeletionTimestamp() == nil {
					left = append(left, it.GetName())
				}
			}
			Expect(left).To(BeEmpty(), "%s left in %s", gvr.Resource, ns)
		}
	})
})
