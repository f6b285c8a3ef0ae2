package integration

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opr8r/opr8r/engines/argo/argotest"
	"github.com/opr8r/opr8r/engines/tekton/tektontest"
)

// Issue 49, item 6: the namespace's provider cache claim holds the
// provider packages its runs' terraform steps install. opr8r-provider-cache
// (config/policy/provider-cache.yaml) lets no pod but a runner pod mount
// it, whoever creates the pod (a tenant, or the controller of a tenant's
// Job, Deployment, Workflow or PipelineRun), and no one but the manager
// make, change or delete it. Its name comes from the install, in
// opr8r-identities' providerCacheClaim.
var _ = Describe("provider cache: no tenant's pod mounts the namespace's cache claim, and no tenant makes, changes or deletes it", Ordered, ContinueOnFailure, func() {
	ctx := context.Background()
	const (
		tenantUser = "cache-tenant"
		claim      = "opr8r-provider-cache"
		schedUser  = "system:kube-scheduler"
		rsUser     = "system:serviceaccount:kube-system:replicaset-controller"
	)
	var (
		ns     string
		tenant client.Client
	)
	identities := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "opr8r-identities", Namespace: "opr8r-system"}}
	mounting := func(name string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "cache", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}})
		}
	}
	template := func(sa string) corev1.PodTemplateSpec {
		p := testPod("", "", sa, mounting(claim))
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "mine"}}, Spec: p.Spec}
	}
	pvc := func(name string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	}

	BeforeAll(func() {
		ns = newNamespace()
		tenantRoles(ns, tenantUser)
		tenant = as(tenantUser)
		By("Argo's and Tekton's controllers hold the ClusterRoles their installs bind (pods in every namespace)")
		clusterRolesFrom(argotest.Module, "manifests/cluster-install-no-crds/workflow-controller-rbac/workflow-controller-clusterrole.yaml",
			rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "argo", Namespace: "argo"}, "argo-cluster-role")
		clusterRolesFrom(tektontest.Module, "config/200-clusterrole.yaml",
			rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "tekton-pipelines-controller", Namespace: "tekton-pipelines"},
			"tekton-pipelines-controller-cluster-access", "tekton-pipelines-controller-tenant-access")
		for _, sa := range []string{runnerSA, "app"} {
			Expect(k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}})).To(Succeed())
		}
		By("the install runs with --provider-cache-claim=" + claim + ", and says so in opr8r-identities")
		Expect(patch(k8sClient, identities, func(c *corev1.ConfigMap) { c.Data["providerCacheClaim"] = claim })).To(Succeed())
		DeferCleanup(func() {
			Expect(patch(k8sClient, identities, func(c *corev1.ConfigMap) { c.Data["providerCacheClaim"] = "" })).To(Succeed())
		})
		Eventually(func() error {
			return tenant.Create(ctx, testPod(ns, "probe", "app", mounting(claim)), client.DryRunAll)
		}).Should(MatchError(ContainSubstring("mounting PersistentVolumeClaim " + claim)))
	})

	It("lets no pod but a runner pod mount the claim, whoever creates it: a tenant, or the controller of a tenant's Job, Deployment, Workflow or PipelineRun", func() {
		refused(tenant.Create(ctx, testPod(ns, "mine", "app", mounting(claim))),
			tenantUser+" may not create pod "+ns+"/mine mounting PersistentVolumeClaim "+claim, "only opr8r's terraform steps")
		refused(tenant.Create(ctx, testPod(ns, "mine-default", "", mounting(claim))), "mounting PersistentVolumeClaim "+claim)
		admitted(tenant.Create(ctx, testPod(ns, "mine-other", "app", mounting("my-own-claim")), client.DryRunAll))

		By("a tenant's Job and Deployment whose pod template mounts the claim are objects like any other; their pods are refused, as the controllers make them")
		admitted(tenant.Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: ns},
			Spec: batchv1.JobSpec{Template: func() corev1.PodTemplateSpec {
				t := template("app")
				t.Spec.RestartPolicy = corev1.RestartPolicyNever
				return t
			}()}}, client.DryRunAll))
		admitted(tenant.Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: ns},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "mine"}}, Template: template("app")}}, client.DryRunAll))
		for _, ctl := range []string{jobUser, rsUser, argoUser, tektonUser} {
			refused(impersonate(ctl).Create(ctx, testPod(ns, "mine-from-a-controller", "app", mounting(claim))),
				ctl+" may not create pod "+ns+"/mine-from-a-controller mounting PersistentVolumeClaim "+claim)
		}

		By("an engine's controller makes opr8r's terraform step pods, which run as a runner service account, with the claim")
		admitted(impersonate(jobUser).Create(ctx, testPod(ns, "net-1-plan-x", runnerSA, mounting(claim)), client.DryRunAll))
		By("a tenant may not make one: opr8r-runner-pods")
		refused(tenant.Create(ctx, testPod(ns, "net-1-plan-y", runnerSA, mounting(claim))), "running as runner service account")
	})

	It("lets only the manager make the claim: no tenant, StatefulSet or ephemeral volume squats its name", func() {
		refused(tenant.Create(ctx, pvc(claim)), tenantUser+" may not create PersistentVolumeClaim "+ns+"/"+claim, "opr8r's manager makes and keeps")
		refused(impersonate(ssUser).Create(ctx, pvc(claim)), "may not create PersistentVolumeClaim "+ns+"/"+claim)
		refused(impersonate("system:serviceaccount:kube-system:ephemeral-volume-controller").Create(ctx, pvc(claim)), "may not create PersistentVolumeClaim")
		admitted(tenant.Create(ctx, pvc("my-own-claim")))
		admitted(k8sClient.Create(ctx, pvc(claim)))
	})

	It("lets only the manager, Kubernetes' controllers and the scheduler change it, and only the manager and Kubernetes' controllers delete it", func() {
		c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: ns}}
		refused(update(tenant, c, func(p *corev1.PersistentVolumeClaim) { p.Labels = map[string]string{"mine": "now"} }),
			tenantUser+" may not update PersistentVolumeClaim "+ns+"/"+claim)
		refused(patch(tenant, c, func(p *corev1.PersistentVolumeClaim) { p.Finalizers = append(p.Finalizers, "example.com/keep") }),
			"may not update PersistentVolumeClaim")
		refused(tenant.Delete(ctx, c), tenantUser+" may not delete PersistentVolumeClaim "+ns+"/"+claim, "ask an admin to empty it")
		admitted(patch(impersonate(schedUser), c, func(p *corev1.PersistentVolumeClaim) {
			p.Annotations = map[string]string{"volume.kubernetes.io/selected-node": "node-a"}
		}))
		admitted(patch(k8sClient, c, func(p *corev1.PersistentVolumeClaim) { p.Labels = map[string]string{"touched": "by-the-manager"} }))

		By("the tenant's own claims are theirs")
		mine := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "my-own-claim", Namespace: ns}}
		admitted(patch(tenant, mine, func(p *corev1.PersistentVolumeClaim) { p.Labels = map[string]string{"mine": "yes"} }))

		By("a tenant's DELETECOLLECTION is judged object by object (the collection's first request has no name and no object): the claim stays")
		err := tenant.DeleteAllOf(ctx, &corev1.PersistentVolumeClaim{}, client.InNamespace(ns))
		Expect(celFailure(err)).To(BeFalse(), "the policy failed on the tenant's DELETECOLLECTION: %v", err)
		refused(err, "may not delete PersistentVolumeClaim "+ns+"/"+claim)
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c)).To(Succeed())
		Expect(c.DeletionTimestamp).To(BeNil())

		By("the namespace controller's DELETECOLLECTION, as the namespace goes, deletes it")
		_, nsCtl := impersonating(namespaceController, nil)
		admitted(nsCtl.DeleteAllOf(ctx, &corev1.PersistentVolumeClaim{}, client.InNamespace(ns)))
		err = k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c)
		Expect(apierrors.IsNotFound(err) || (err == nil && c.DeletionTimestamp != nil)).To(BeTrue(), "the claim after the namespace controller's delete: %v", err)
	})
})
