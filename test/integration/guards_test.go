package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	wfclientset "github.com/argoproj/argo-workflows/v3/pkg/client/clientset/versioned"
	"github.com/argoproj/argo-workflows/v3/workflow/hydrator/fake"
	argoutil "github.com/argoproj/argo-workflows/v3/workflow/util"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	tektonv1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	tektonv1beta1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/opr8r/opr8r/engines/argo/argotest"
	"github.com/opr8r/opr8r/engines/tekton/tektontest"
	"github.com/opr8r/opr8r/test/envtestutil"
)

// The identities of the guards' specs, as the API server sees them: a
// tenant with Kubernetes' edit role (and Argo's and Tekton's aggregates of
// it, and opr8r-editor) in the namespace; the engines' controllers, with
// the ClusterRoles their installs bind; Kubernetes' own controllers; a
// kubelet; the runner service account with and without the pod name a
// kubelet-issued token carries. opr8r's manager is the suite's admin.
const (
	guardTenant  = "guard-tenant"
	argoUser     = "system:serviceaccount:argo:argo"
	tektonUser   = "system:serviceaccount:tekton-pipelines:tekton-pipelines-controller"
	jobUser      = "system:serviceaccount:kube-system:job-controller"
	gcUser       = "system:serviceaccount:kube-system:generic-garbage-collector"
	ssUser       = "system:serviceaccount:kube-system:statefulset-controller"
	kubeletUser  = "system:node:guard-node"
	runnerSA     = "opr8r-runner"
	podNameExtra = "authentication.kubernetes.io/pod-name"
)

// impersonating returns the REST config and a client of the suite's admin
// acting as user, as the API server's authenticator would present them
// (a service account's groups, a kubelet's; extra such as a pod-bound
// token's pod name).
func impersonating(user string, extra map[string][]string) (*rest.Config, client.Client) {
	groups := []string{"system:authenticated"}
	if rest, ok := strings.CutPrefix(user, "system:serviceaccount:"); ok {
		ns, _, _ := strings.Cut(rest, ":")
		groups = append(groups, "system:serviceaccounts", "system:serviceaccounts:"+ns)
	} else if strings.HasPrefix(user, "system:node:") {
		groups = append(groups, "system:nodes")
	}
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups, Extra: extra}
	cl, err := client.New(c, client.Options{Scheme: k8sClient.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	return c, cl
}

func impersonate(user string) client.Client { _, c := impersonating(user, nil); return c }

// runnerIn is the runner service account of ns, with a kubelet-issued
// token of pod (none: no pod name, as impersonation or a minted token).
func runnerIn(ns, pod string) client.Client {
	var extra map[string][]string
	if pod != "" {
		extra = map[string][]string{podNameExtra: {pod}}
	}
	_, c := impersonating("system:serviceaccount:"+ns+":"+runnerSA, extra)
	return c
}

// moduleObjects reads the YAML documents of a file in a module pinned in
// go.mod (the engines' real RBAC).
func moduleObjects(module, file string) []*unstructured.Unstructured {
	dir, err := envtestutil.ModuleDir(module)
	Expect(err).NotTo(HaveOccurred())
	b, err := os.ReadFile(filepath.Join(dir, file))
	Expect(err).NotTo(HaveOccurred())
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(b)), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			break
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
	return out
}

func createIgnoringExisting(obj client.Object) {
	if err := k8sClient.Create(context.Background(), obj); err != nil && !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
}

// clusterRolesFrom creates a module's ClusterRoles (of the given names)
// and binds them cluster-wide to subject, as the engine's install does.
func clusterRolesFrom(module, file string, subject rbacv1.Subject, names ...string) {
	for _, u := range moduleObjects(module, file) {
		if u.GetKind() != "ClusterRole" || !containsString(names, u.GetName()) {
			continue
		}
		u.SetLabels(nil) // no aggregation into the suite's own roles
		createIgnoringExisting(u)
		createIgnoringExisting(&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "guard-" + u.GetName()},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: u.GetName()}, Subjects: []rbacv1.Subject{subject}})
	}
}

func containsString(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// tenantRoles binds, in ns, Kubernetes' edit role as a real cluster has it
// (edit, and the bootstrap roles edit aggregates, since envtest runs no
// aggregation controller), Argo's and Tekton's aggregates of it (their real
// manifests) and opr8r-editor to user.
func tenantRoles(ns, user string) {
	for _, r := range []struct{ module, file, name string }{
		{argotest.Module, "manifests/cluster-install-no-crds/workflow-controller-rbac/workflow-aggregate-roles.yaml", "argo-aggregate-to-edit"},
		{argotest.Module, "manifests/cluster-install-no-crds/workflow-controller-rbac/workflow-aggregate-roles.yaml", "argo-aggregate-to-view"},
		{tektontest.Module, "config/clusterrole-aggregate-edit.yaml", "tekton-aggregate-edit"},
	} {
		for _, u := range moduleObjects(r.module, r.file) {
			if u.GetKind() == "ClusterRole" && u.GetName() == r.name {
				u.SetLabels(nil)
				createIgnoringExisting(u)
			}
		}
	}
	for _, role := range []string{"edit", "system:aggregate-to-edit", "system:aggregate-to-view", "argo-aggregate-to-edit", "argo-aggregate-to-view", "tekton-aggregate-edit"} {
		Expect(k8sClient.Create(context.Background(), &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "guard-" + strings.ReplaceAll(role, ":", "-"), Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		})).To(Succeed())
	}
	bound(ns, user, "", "pods", "update")
	grant(ns, "editor", user)
}

// refused expects err to be the API server's refusal, naming what and why.
func refused(err error, subs ...string) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred())
	Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	for _, s := range subs {
		Expect(err.Error()).To(ContainSubstring(s))
	}
}

func admitted(err error) {
	GinkgoHelper()
	Expect(err).NotTo(HaveOccurred())
}

func testPod(ns, name, sa string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{Name: "step", Image: "busybox"}}}}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func labelled(kv ...string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		for i := 0; i < len(kv); i += 2 {
			p.Labels[kv[i]] = kv[i+1]
		}
	}
}

func ownedBy(apiVersion, kind, name string, uid types.UID) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.OwnerReferences = append(p.OwnerReferences, metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid, Controller: ptr.To(true)})
	}
}

// update applies fn to a fresh copy of obj and updates it as c.
func update[T client.Object](c client.Client, obj T, fn func(T)) error {
	Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	fn(obj)
	return c.Update(context.Background(), obj)
}

// patch applies fn to a fresh copy of obj and merge-patches it as c.
func patch[T client.Object](c client.Client, obj T, fn func(T)) error {
	Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	base := obj.DeepCopyObject().(T)
	fn(obj)
	return c.Patch(context.Background(), obj, client.MergeFrom(base))
}

// opr8rLabels are the labels opr8r's manager puts on a child of run.
func opr8rLabels(run string) map[string]string {
	return map[string]string{"infra.opr8r.io/run": run, "infra.opr8r.io/run-number": "1", "infra.opr8r.io/run-type": "apply"}
}

var runOwner = []metav1.OwnerReference{{APIVersion: "infra.opr8r.io/v1alpha1", Kind: "TerraformRun", Name: "net", UID: "00000000-0000-0000-0000-00000000a0a0", Controller: ptr.To(true)}}

var _ = Describe("guards: a tenant with edit cannot change opr8r's engine objects, squat on engines' children, run as the runner, touch its pods or forge a step's results", Ordered, ContinueOnFailure, func() {
	ctx := context.Background()
	var (
		ns, free  string // free: a namespace without active runs (no opr8r-guard)
		tenant    client.Client
		tenantCfg *rest.Config
		argo      client.Client
		tektonC   client.Client
		jobCtl    client.Client
		gc        client.Client
		digest    = digestOf("guards")
	)

	BeforeAll(func() {
		ns, free = newNamespace(), newNamespace()
		for _, n := range []string{ns, free} {
			tenantRoles(n, guardTenant)
			for _, sa := range []string{runnerSA, "app"} {
				Expect(k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: n}})).To(Succeed())
			}
			b, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), "config", "rbac", "runner", "role.yaml"))
			Expect(err).NotTo(HaveOccurred())
			role := &rbacv1.Role{}
			Expect(yaml.Unmarshal(b, role)).To(Succeed())
			role.Namespace = n
			Expect(k8sClient.Create(ctx, role)).To(Succeed())
			Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: runnerSA, Namespace: n},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: runnerSA, Namespace: n}}})).To(Succeed())
			By("the tenant's own service account app gets the same rights (its Workflows report their outputs, its pods write Secrets)")
			Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: n},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "app", Namespace: n}}})).To(Succeed())
		}
		tenant, tenantCfg = as(guardTenant), asConfig(guardTenant)
		clusterRolesFrom(argotest.Module, "manifests/cluster-install-no-crds/workflow-controller-rbac/workflow-controller-clusterrole.yaml",
			rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "argo", Namespace: "argo"}, "argo-cluster-role")
		clusterRolesFrom(tektontest.Module, "config/200-clusterrole.yaml",
			rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "tekton-pipelines-controller", Namespace: "tekton-pipelines"},
			"tekton-pipelines-controller-cluster-access", "tekton-pipelines-controller-tenant-access")
		createIgnoringExisting(&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "guard-kubelet"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: kubeletUser}}})
		argo, tektonC, jobCtl, gc = impersonate(argoUser), impersonate(tektonUser), impersonate(jobUser), impersonate(gcUser)

		By("opr8r's manager lists its active children in the namespace, with the runner service accounts")
		Expect(k8sClient.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "opr8r-guard", Namespace: ns},
			Data: map[string]string{"children": "jb-1\nnet-1\nnet-1-1\ntk-1", "runnerServiceAccounts": runnerSA}})).To(Succeed())
	})

	Describe("the identities and the guard list", func() {
		It("lets only the manager write opr8r-guard", func() {
			g := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "opr8r-guard", Namespace: ns}}
			refused(update(tenant, g, func(c *corev1.ConfigMap) { c.Data["children"] = "" }),
				guardTenant+" may not update ConfigMap "+ns+"/opr8r-guard", "keeps in it the runs it has active")
			refused(tenant.Delete(ctx, g), "may not delete ConfigMap "+ns+"/opr8r-guard")
			refused(tenant.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "opr8r-guard", Namespace: free}}),
				"may not create ConfigMap "+free+"/opr8r-guard")
			admitted(update(k8sClient, g, func(c *corev1.ConfigMap) { c.Labels = map[string]string{"touched": "by-the-manager"} }))
		})

		It("uses the real roles: the tenant may not write TerraformRun status, so it is not the manager", func() {
			for _, c := range []*rest.Config{tenantCfg} {
				ssar, err := kubernetes.NewForConfigOrDie(c).AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, selfAccess(ns, "infra.opr8r.io", "terraformruns", "status", "update"), metav1.CreateOptions{})
				Expect(err).NotTo(HaveOccurred())
				Expect(ssar.Status.Allowed).To(BeFalse())
				ssar, err = kubernetes.NewForConfigOrDie(c).AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, selfAccess(ns, "", "pods", "exec", "create"), metav1.CreateOptions{})
				Expect(err).NotTo(HaveOccurred())
				Expect(ssar.Status.Allowed).To(BeTrue(), "edit grants pods/exec: the guards are what refuses it")
			}
		})
	})

	Describe("Argo", func() {
		var wf *wfv1.Workflow
		gateID, planID := "net-1-2000", "net-1-1000"

		BeforeAll(func() {
			wf = &wfv1.Workflow{
				ObjectMeta: metav1.ObjectMeta{Name: "net-1", Namespace: ns, Labels: opr8rLabels("net"), OwnerReferences: runOwner,
					Annotations: map[string]string{"infra.opr8r.io/gate-needed": "1", "infra.opr8r.io/gate-digest": digest, "infra.opr8r.io/gate-users": "*",
						"infra.opr8r.io/gate-groups": "", "infra.opr8r.io/gate-barred": ""}},
				Spec: wfv1.WorkflowSpec{Entrypoint: "main", ServiceAccountName: runnerSA, Templates: []wfv1.Template{
					{Name: "main", Container: &corev1.Container{Image: "terraform:1.11"}},
					{Name: "approve", Suspend: &wfv1.SuspendTemplate{}},
				}},
			}
			Expect(k8sClient.Create(ctx, wf)).To(Succeed())
			wf.Status = wfv1.WorkflowStatus{Phase: wfv1.WorkflowRunning, Nodes: wfv1.Nodes{
				planID: {ID: planID, Name: "net-1.plan", DisplayName: "plan", Type: wfv1.NodeTypePod, Phase: wfv1.NodeSucceeded,
					Outputs: argotest.Params("digest", digest, "has-changes", "true")},
				gateID: {ID: gateID, Name: "net-1.approve", DisplayName: "approve", TemplateName: "approve", Type: wfv1.NodeTypeSuspend, Phase: wfv1.NodeRunning,
					Inputs: &wfv1.Inputs{Parameters: []wfv1.Parameter{{Name: "digest", Value: wfv1.AnyStringPtr(digest)}}},
					Outputs: &wfv1.Outputs{Parameters: []wfv1.Parameter{
						{Name: "decision", ValueFrom: &wfv1.ValueFrom{Supplied: &wfv1.SuppliedValueFrom{}, Default: wfv1.AnyStringPtr("approve")}},
						{Name: "approved-digest", ValueFrom: &wfv1.ValueFrom{Supplied: &wfv1.SuppliedValueFrom{}, Default: wfv1.AnyStringPtr(digest)}},
					}}},
			}}
			Expect(k8sClient.Update(ctx, wf)).To(Succeed())
		})

		It("refuses a tenant's change of opr8r's Workflow spec, labels, owners or finalizers; lets it stop and suspend it, and Argo and the manager change it", func() {
			refused(update(tenant, wf, func(w *wfv1.Workflow) { w.Spec.Templates[0].Container.Image = "evil:latest" }),
				guardTenant+" may not change the spec of opr8r's Workflow net-1 but to stop or suspend it", "TerraformRun net")
			refused(update(tenant, wf, func(w *wfv1.Workflow) { w.Labels["infra.opr8r.io/approval"] = "approved" }),
				guardTenant+" may not set, change or remove opr8r's labels or annotations (infra.opr8r.io/) on workflows net-1")
			refused(update(tenant, wf, func(w *wfv1.Workflow) { delete(w.Labels, "infra.opr8r.io/run") }), "on workflows net-1")
			refused(update(tenant, wf, func(w *wfv1.Workflow) { w.OwnerReferences = nil }), "may not change the ownerReferences or finalizers of opr8r's Workflow net-1")
			refused(update(tenant, wf, func(w *wfv1.Workflow) { w.Finalizers = []string{"guard.test/hold"} }), "ownerReferences or finalizers")

			By("a tenant may suspend and stop it, and label it with labels that are not opr8r's")
			admitted(update(tenant, wf, func(w *wfv1.Workflow) { w.Spec.Suspend = ptr.To(true); w.Labels["team"] = "a" }))
			admitted(update(tenant, wf, func(w *wfv1.Workflow) { w.Spec.Suspend = nil }))

			By("Argo's controller changes spec and status; it may not change opr8r's labels")
			admitted(update(argo, wf, func(w *wfv1.Workflow) {
				w.Spec.Templates[0].ActiveDeadlineSeconds = ptr.To(intstr.FromInt32(600))
				w.Labels["workflows.argoproj.io/phase"] = "Running"
			}))
			refused(update(argo, wf, func(w *wfv1.Workflow) { w.Labels["infra.opr8r.io/approval"] = "approved" }), argoUser+" may not set, change or remove opr8r's labels")
			By("opr8r's manager changes its labels")
			admitted(update(k8sClient, wf, func(w *wfv1.Workflow) { w.Labels["infra.opr8r.io/approval"] = "waiting" }))
		})

		It("refuses a tenant's forged step status (outputs, the gate's name, compressed nodes); lets a person resume the gate with Argo's own code", func() {
			refused(update(tenant, wf, func(w *wfv1.Workflow) {
				n := w.Status.Nodes[planID]
				n.Outputs = argotest.Params("digest", digestOf("forged"), "has-changes", "true")
				w.Status.Nodes[planID] = n
			}), guardTenant+" may not change the status of opr8r's Workflow net-1 but to resume its approval gate")
			refused(update(tenant, wf, func(w *wfv1.Workflow) {
				n := w.Status.Nodes[gateID]
				n.DisplayName, n.Phase = "not-the-gate", wfv1.NodeSucceeded
				w.Status.Nodes[gateID] = n
			}), "but to resume its approval gate")
			refused(update(tenant, wf, func(w *wfv1.Workflow) {
				n := w.Status.Nodes[gateID]
				n.Phase = wfv1.NodeSucceeded
				n.Outputs.Parameters = append(n.Outputs.Parameters, wfv1.Parameter{Name: "extra", Value: wfv1.AnyStringPtr("x")})
				w.Status.Nodes[gateID] = n
			}), "but to resume its approval gate")
			refused(update(tenant, wf, func(w *wfv1.Workflow) { w.Status.CompressedNodes = "H4sIAAAAAAAA/6quBQQAAP//Q7+m4AIAAAA=" }),
				"may not write compressed or offloaded node status on opr8r's Workflow net-1")
			Expect(wf.Status.Nodes[gateID].Phase).To(Equal(wfv1.NodeRunning))

			By("argo resume, as the tenant: the gate's node to Succeeded, with its supplied outputs")
			wfc := wfclientset.NewForConfigOrDie(tenantCfg)
			Expect(argoutil.ResumeWorkflow(ctx, wfc.ArgoprojV1alpha1().Workflows(ns), fake.Noop, wf.Name, "")).To(Succeed())
			Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(wf), wf)).To(Succeed())
			Expect(wf.Status.Nodes[gateID].Phase).To(Equal(wfv1.NodeSucceeded))
			Expect(wf.Annotations).To(HaveKeyWithValue("infra.opr8r.io/gate-decided-by", guardTenant))
		})

		It("refuses a tenant's Workflow, WorkflowTemplate or CronWorkflow that runs as the runner or puts opr8r's labels on its pods; admits its own", func() {
			mk := func(name string, mutate func(*wfv1.WorkflowSpec)) *wfv1.Workflow {
				w := &wfv1.Workflow{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: free},
					Spec: wfv1.WorkflowSpec{Entrypoint: "main", Templates: []wfv1.Template{{Name: "main", Container: &corev1.Container{Image: "busybox"}}}}}
				mutate(&w.Spec)
				return w
			}
			refused(tenant.Create(ctx, mk("sa", func(s *wfv1.WorkflowSpec) { s.ServiceAccountName = runnerSA })),
				guardTenant+" may not create workflows sa running as runner service account opr8r-runner", "run only opr8r's own Workflows")
			refused(tenant.Create(ctx, mk("tmpl-sa", func(s *wfv1.WorkflowSpec) { s.Templates[0].ServiceAccountName = runnerSA })), "running as runner service account opr8r-runner")
			refused(tenant.Create(ctx, mk("exec-sa", func(s *wfv1.WorkflowSpec) { s.Executor = &wfv1.ExecutorConfig{ServiceAccountName: runnerSA} })), "runner service account")
			refused(tenant.Create(ctx, mk("patch", func(s *wfv1.WorkflowSpec) { s.PodSpecPatch = `{"ServiceAccountName": "opr8r-runner"}` })),
				"with a podSpecPatch that names a service account or holds an escape")
			refused(tenant.Create(ctx, mk("escape", func(s *wfv1.WorkflowSpec) { s.Templates[0].PodSpecPatch = `{"service\u0041ccountName": "x"}` })), "podSpecPatch")
			refused(tenant.Create(ctx, mk("pod-labels", func(s *wfv1.WorkflowSpec) {
				s.PodMetadata = &wfv1.Metadata{Labels: map[string]string{"infra.opr8r.io/run": "net"}}
			})), "putting opr8r's labels or annotations (infra.opr8r.io/) on its Workflows or pods")
			refused(tenant.Create(ctx, mk("wf-labels", func(s *wfv1.WorkflowSpec) {
				s.WorkflowMetadata = &wfv1.WorkflowMetadata{Labels: map[string]string{"infra.opr8r.io/run": "net"}}
			})), "on its Workflows or pods")
			w := mk("labelled", func(*wfv1.WorkflowSpec) {})
			w.Labels = opr8rLabels("net")
			refused(tenant.Create(ctx, w), "may not set, change or remove opr8r's labels or annotations (infra.opr8r.io/) on workflows labelled")
			refused(tenant.Create(ctx, &wfv1.WorkflowTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: free},
				Spec: mk("", func(s *wfv1.WorkflowSpec) { s.ServiceAccountName = runnerSA }).Spec}), "may not create workflowtemplates t running as runner service account")
			refused(tenant.Create(ctx, &wfv1.CronWorkflow{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: free},
				Spec: wfv1.CronWorkflowSpec{Schedules: []string{"* * * * *"}, WorkflowSpec: mk("", func(s *wfv1.WorkflowSpec) { s.Templates[0].ServiceAccountName = runnerSA }).Spec}}),
				"may not create cronworkflows c running as runner service account")

			By("the tenant's own Workflow, with its own service account and a harmless podSpecPatch")
			admitted(tenant.Create(ctx, mk("own", func(s *wfv1.WorkflowSpec) {
				s.ServiceAccountName = "app"
				s.PodSpecPatch = `{"containers":[{"name":"main","resources":{"limits":{"cpu":"1"}}}]}`
			})))
			By("opr8r's manager makes Workflows labelled and running as the runner")
			w = mk("net-2", func(s *wfv1.WorkflowSpec) { s.ServiceAccountName = runnerSA })
			w.Labels = opr8rLabels("net")
			admitted(k8sClient.Create(ctx, w))
		})

		It("lets only Argo's controller make a pod Argo would take for a Workflow's step, labelled as the Workflow that owns it", func() {
			w := &wfv1.Workflow{}
			Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: free, Name: "own"}, w)).To(Succeed())
			squat := testPod(free, "own-main-123", "app", labelled("workflows.argoproj.io/workflow", "own"))
			refused(tenant.Create(ctx, squat), guardTenant+" may not create pod own-main-123 carrying Argo's label workflows.argoproj.io/workflow", "only Argo's controller")
			refused(tenant.Create(ctx, testPod(free, "owned", "app", ownedBy("argoproj.io/v1alpha1", "Workflow", "own", w.UID))), "an ownerReference to a Workflow")

			By("Argo's controller, from a Workflow whose podMetadata names another Workflow")
			refused(argo.Create(ctx, testPod(free, "own-main-456", "app", labelled("workflows.argoproj.io/workflow", "net-2"), ownedBy("argoproj.io/v1alpha1", "Workflow", "own", w.UID))),
				"Argo may not create pod own-main-456 labelled for Workflow net-2", "Workflow own owns it")
			ok := testPod(free, "own-main-789", "app", labelled("workflows.argoproj.io/workflow", "own"), ownedBy("argoproj.io/v1alpha1", "Workflow", "own", w.UID))
			ok.Annotations = map[string]string{"workflows.argoproj.io/node-id": "own-789"}
			admitted(argo.Create(ctx, ok))

			By("a tenant may not label its own pod as a Workflow's later")
			plain := testPod(free, "plain", "app")
			admitted(tenant.Create(ctx, plain))
			refused(update(tenant, plain, func(p *corev1.Pod) { p.Labels = map[string]string{"workflows.argoproj.io/workflow": "own"} }),
				"may not add or change Argo's label workflows.argoproj.io/workflow")
			By("Argo marks its pod done; the garbage collector drops the ownerReference of a deleted Workflow")
			admitted(update(argo, ok, func(p *corev1.Pod) { p.Labels["workflows.argoproj.io/completed"] = "true" }))
			admitted(update(gc, ok, func(p *corev1.Pod) { p.OwnerReferences = nil }))
		})

		It("lets only a Workflow's own pods write its steps' results, with a kubelet-issued token; for opr8r's active runs only as the runner", func() {
			result := func(ns, wfName, node string) *wfv1.WorkflowTaskResult {
				return &wfv1.WorkflowTaskResult{ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: ns, Labels: map[string]string{"workflows.argoproj.io/workflow": wfName}},
					NodeResult: wfv1.NodeResult{Outputs: argotest.Params("digest", digestOf("forged"))}}
			}
			By("any Workflow's (a tenant's own, outside opr8r's active runs): only its pods, with a kubelet-issued token")
			refused(tenant.Create(ctx, result(free, "own", "own-789")), guardTenant+" may not write the results of a step of Workflow own", "pod-name missing")
			_, appNoPod := impersonating("system:serviceaccount:"+free+":app", nil)
			refused(appNoPod.Create(ctx, result(free, "own", "own-789")), "may not write the results of a step of Workflow own", "pod-name missing")
			_, other := impersonating("system:serviceaccount:"+free+":app", map[string][]string{podNameExtra: {"other-main-1"}})
			refused(other.Create(ctx, result(free, "own", "own-789")), "pod-name other-main-1")
			_, own := impersonating("system:serviceaccount:"+free+":app", map[string][]string{podNameExtra: {"own-main-789"}})
			r := result(free, "own", "own-789")
			admitted(own.Create(ctx, r))
			refused(patch(own, r, func(t *wfv1.WorkflowTaskResult) { t.Labels["workflows.argoproj.io/workflow"] = "own-2" }), "or move them from Workflow own")

			By("an active run's: only its pods running as the runner")
			refused(tenant.Create(ctx, result(ns, "net-1", planID)), "the results of a step of Workflow net-1")
			refused(runnerIn(ns, "").Create(ctx, result(ns, "net-1", planID)), "the results of a step of Workflow net-1")
			_, app := impersonating("system:serviceaccount:"+ns+":app", map[string][]string{podNameExtra: {"net-1-plan-1"}})
			refused(app.Create(ctx, result(ns, "net-1", planID)), "may not create the results of a step of Workflow net-1: it belongs to net-1, an active run of opr8r",
				"as a runner service account")
			refused(runnerIn(ns, "net-1-1-plan-1").Create(ctx, result(ns, "net-1", planID)), "pod net-1-1-plan-1 is not one of its pods")
			By("the plan step's pod, with its kubelet-issued token, writes and patches them")
			r = result(ns, "net-1", planID)
			admitted(runnerIn(ns, "net-1-plan-1").Create(ctx, r))
			admitted(patch(runnerIn(ns, "net-1-plan-1"), r, func(t *wfv1.WorkflowTaskResult) {
				t.Labels["workflows.argoproj.io/report-outputs-completed"] = "true"
			}))
		})
	})

	Describe("Tekton", func() {
		var pr *tektonv1.PipelineRun
		var cr *tektonv1beta1.CustomRun
		var trun *tektonv1.TaskRun

		BeforeAll(func() {
			pr = &tektonv1.PipelineRun{ObjectMeta: metav1.ObjectMeta{Name: "tk-1", Namespace: ns, Labels: opr8rLabels("tk"), OwnerReferences: runOwner},
				Spec: tektonv1.PipelineRunSpec{
					PipelineSpec:    &tektonv1.PipelineSpec{Tasks: []tektonv1.PipelineTask{{Name: "plan", TaskSpec: &tektonv1.EmbeddedTask{TaskSpec: tektonv1.TaskSpec{Steps: []tektonv1.Step{{Name: "plan", Image: "terraform"}}}}}}},
					TaskRunTemplate: tektonv1.PipelineTaskRunTemplate{ServiceAccountName: runnerSA},
				}}
			Expect(k8sClient.Create(ctx, pr)).To(Succeed())
			owner := []metav1.OwnerReference{*metav1.NewControllerRef(pr, tektonv1.SchemeGroupVersion.WithKind("PipelineRun"))}
			labels := opr8rLabels("tk")
			labels["tekton.dev/pipelineRun"] = "tk-1"
			trun = &tektonv1.TaskRun{ObjectMeta: metav1.ObjectMeta{Name: "tk-1-plan", Namespace: ns, Labels: labels, OwnerReferences: owner},
				Spec: tektonv1.TaskRunSpec{ServiceAccountName: runnerSA, TaskSpec: &tektonv1.TaskSpec{Steps: []tektonv1.Step{{Name: "plan", Image: "terraform"}}}}}
			By("Tekton's controller makes opr8r's PipelineRun's TaskRun, running as the runner, labelled as the PipelineRun")
			admitted(tektonC.Create(ctx, trun))
			cr = &tektonv1beta1.CustomRun{ObjectMeta: metav1.ObjectMeta{Name: "tk-1-approve", Namespace: ns, Labels: labels, OwnerReferences: owner},
				Spec: tektonv1beta1.CustomRunSpec{CustomRef: &tektonv1beta1.TaskRef{APIVersion: "infra.opr8r.io/v1alpha1", Kind: "Approval"},
					Params: tektonv1beta1.Params{{Name: "digest", Value: *tektonv1beta1.NewStructuredValues(digest)}}}}
			admitted(tektonC.Create(ctx, cr))
		})

		It("refuses a tenant's change of opr8r's runs but a cancel; lets Tekton cancel and label them, but not change opr8r's labels", func() {
			refused(update(tenant, pr, func(p *tektonv1.PipelineRun) { p.Spec.TaskRunTemplate.ServiceAccountName = "app" }),
				guardTenant+" may not change the spec of opr8r's pipelineruns tk-1 but to cancel it (spec.status Cancelled, CancelledRunFinally, StoppedRunFinally)")
			refused(update(tenant, pr, func(p *tektonv1.PipelineRun) { p.Spec.Status = tektonv1.PipelineRunSpecStatusPending }), "but to cancel it")
			refused(update(tenant, trun, func(t *tektonv1.TaskRun) { t.Spec.Status = tektonv1.TaskRunSpecStatusCancelled }),
				guardTenant+" may not change the spec of opr8r's taskruns tk-1-plan: opr8r's manager built it for TerraformRun tk")
			refused(update(tenant, cr, func(c *tektonv1beta1.CustomRun) {
				c.Spec.Params[0].Value = *tektonv1beta1.NewStructuredValues(digestOf("forged"))
			}),
				"may not change the spec of opr8r's customruns tk-1-approve but to cancel it (spec.status RunCancelled)")
			refused(update(tenant, pr, func(p *tektonv1.PipelineRun) { p.Labels["infra.opr8r.io/approval"] = "approved" }),
				"may not set, change or remove opr8r's labels or annotations (infra.opr8r.io/) on pipelineruns tk-1")
			refused(update(tenant, trun, func(t *tektonv1.TaskRun) { t.OwnerReferences = nil }), "may not change the ownerReferences or finalizers of opr8r's taskruns tk-1-plan")

			By("Tekton's label update may add its own labels, not revert opr8r's")
			admitted(update(tektonC, trun, func(t *tektonv1.TaskRun) { t.Labels["tekton.dev/task"] = "plan" }))
			refused(update(tektonC, pr, func(p *tektonv1.PipelineRun) { delete(p.Labels, "infra.opr8r.io/run-number") }), tektonUser+" may not set, change or remove opr8r's labels")
			By("a person cancels the gate and the PipelineRun; Tekton cancels a TaskRun")
			admitted(update(tenant, cr, func(c *tektonv1beta1.CustomRun) {
				c.Spec.Status, c.Spec.StatusMessage = tektonv1beta1.CustomRunSpecStatusCancelled, "cancelled by a person"
			}))
			admitted(update(tenant, pr, func(p *tektonv1.PipelineRun) { p.Spec.Status = tektonv1.PipelineRunSpecStatusCancelledRunFinally }))
			admitted(update(tektonC, trun, func(t *tektonv1.TaskRun) { t.Spec.Status = tektonv1.TaskRunSpecStatusCancelled }))
		})

		It("leaves a tenant no way to write a step's status: edit has no status subresource, a main-resource write drops it, and a status right alone is refused", func() {
			trun.Status.Results = []tektonv1.TaskRunResult{{Name: "digest", Type: tektonv1.ResultsTypeString, Value: *tektonv1.NewStructuredValues(digestOf("forged"))}}
			err := tenant.Status().Update(ctx, trun)
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring(`cannot update resource "taskruns/status"`))
			By("a main-resource write keeps the stored status (and changes nothing the policy refuses)")
			_ = update(tenant, trun, func(t *tektonv1.TaskRun) {
				t.Status.Results = []tektonv1.TaskRunResult{{Name: "digest", Type: tektonv1.ResultsTypeString, Value: *tektonv1.NewStructuredValues(digestOf("forged"))}}
			})
			Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(trun), trun)).To(Succeed())
			Expect(trun.Status.Results).To(BeEmpty())
			By("a user granted taskruns/status is refused; Tekton's controller writes it")
			Expect(k8sClient.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "guard-status", Namespace: ns},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{"tekton.dev"}, Resources: []string{"taskruns/status", "customruns/status"}, Verbs: []string{"get", "update", "patch"}}}})).To(Succeed())
			Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "guard-status", Namespace: ns},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "guard-status"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "guard-statuser"}}})).To(Succeed())
			bound(ns, "guard-statuser", "tekton.dev", "taskruns/status", "update")
			statuser := impersonate("guard-statuser")
			Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(trun), trun)).To(Succeed())
			trun.Status.PodName = "tk-1-plan-pod"
			refused(statuser.Status().Update(ctx, trun), "guard-statuser may not write the status of opr8r's taskruns tk-1-plan")
			admitted(tektonC.Status().Update(ctx, trun))
		})

		It("refuses a tenant's run as the runner, or labelling its TaskRuns as opr8r's; admits its own", func() {
			tenantPR := func(name string, mutate func(*tektonv1.PipelineRun)) *tektonv1.PipelineRun {
				p := &tektonv1.PipelineRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: free},
					Spec: tektonv1.PipelineRunSpec{PipelineSpec: &tektonv1.PipelineSpec{Tasks: []tektonv1.PipelineTask{{Name: "t",
						TaskSpec: &tektonv1.EmbeddedTask{TaskSpec: tektonv1.TaskSpec{Steps: []tektonv1.Step{{Name: "s", Image: "busybox"}}}}}}}}}
				mutate(p)
				return p
			}
			refused(tenant.Create(ctx, tenantPR("sa", func(p *tektonv1.PipelineRun) { p.Spec.TaskRunTemplate.ServiceAccountName = runnerSA })),
				guardTenant+" may not create pipelineruns sa running as runner service account opr8r-runner")
			refused(tenant.Create(ctx, tenantPR("specs", func(p *tektonv1.PipelineRun) {
				p.Spec.TaskRunSpecs = []tektonv1.PipelineTaskRunSpec{{PipelineTaskName: "t", ServiceAccountName: runnerSA}}
			})), "running as runner service account")
			refused(tenant.Create(ctx, tenantPR("meta", func(p *tektonv1.PipelineRun) {
				p.Spec.PipelineSpec.Tasks[0].TaskSpec.Metadata = tektonv1.PipelineTaskMetadata{Labels: map[string]string{"infra.opr8r.io/run": "tk"}}
			})), "putting opr8r's labels or annotations (infra.opr8r.io/) on its TaskRuns")
			refused(tenant.Create(ctx, &tektonv1.TaskRun{ObjectMeta: metav1.ObjectMeta{Name: "tr", Namespace: free},
				Spec: tektonv1.TaskRunSpec{ServiceAccountName: runnerSA, TaskSpec: &tektonv1.TaskSpec{Steps: []tektonv1.Step{{Name: "s", Image: "busybox"}}}}}),
				"may not create taskruns tr running as runner service account")
			refused(tenant.Create(ctx, &tektonv1.Task{ObjectMeta: metav1.ObjectMeta{Name: "task", Namespace: free, Labels: map[string]string{"infra.opr8r.io/step": "plan"}},
				Spec: tektonv1.TaskSpec{Steps: []tektonv1.Step{{Name: "s", Image: "busybox"}}}}), "on tasks task")
			admitted(tenant.Create(ctx, tenantPR("own", func(p *tektonv1.PipelineRun) { p.Spec.TaskRunTemplate.ServiceAccountName = "app" })))
		})

		It("lets only Tekton's controller make TaskRuns, CustomRuns and pods Tekton would adopt, labelled as their owner", func() {
			own := &tektonv1.PipelineRun{}
			Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: free, Name: "own"}, own)).To(Succeed())
			owner := []metav1.OwnerReference{*metav1.NewControllerRef(own, tektonv1.SchemeGroupVersion.WithKind("PipelineRun"))}
			squat := &tektonv1.TaskRun{ObjectMeta: metav1.ObjectMeta{Name: "own-t", Namespace: free, Labels: map[string]string{"tekton.dev/pipelineRun": "own"}, OwnerReferences: owner},
				Spec: tektonv1.TaskRunSpec{TaskSpec: &tektonv1.TaskSpec{Steps: []tektonv1.Step{{Name: "s", Image: "busybox"}}}}}
			refused(tenant.Create(ctx, squat.DeepCopy()), guardTenant+" may not create taskruns own-t carrying Tekton's label tekton.dev/pipelineRun or an ownerReference to a PipelineRun")
			gate := &tektonv1beta1.CustomRun{ObjectMeta: metav1.ObjectMeta{Name: "approve-squat", Namespace: ns, Labels: map[string]string{"tekton.dev/pipelineRun": "tk-1", "tekton.dev/pipelineTask": "approve"}},
				Spec: tektonv1beta1.CustomRunSpec{CustomRef: &tektonv1beta1.TaskRef{APIVersion: "infra.opr8r.io/v1alpha1", Kind: "Approval"}}}
			refused(tenant.Create(ctx, gate), "may not create customruns approve-squat carrying Tekton's label tekton.dev/pipelineRun")
			By("Tekton's controller, from a run whose metadata names another PipelineRun")
			wrong := squat.DeepCopy()
			wrong.Name, wrong.Labels["tekton.dev/pipelineRun"] = "own-u", "tk-1"
			refused(tektonC.Create(ctx, wrong), "Tekton may not create taskruns own-u labelled tekton.dev/pipelineRun=tk-1 when PipelineRun own owns it")
			admitted(tektonC.Create(ctx, squat))

			By("a pod owned by a TaskRun")
			pod := testPod(free, "own-t-pod", "app", labelled("tekton.dev/taskRun", "own-t"), ownedBy("tekton.dev/v1", "TaskRun", "own-t", squat.UID))
			refused(tenant.Create(ctx, pod.DeepCopy()), "may not create pods own-t-pod carrying Tekton's label tekton.dev/taskRun")
			admitted(tektonC.Create(ctx, pod))
			By("a pod of the name Tekton would give a TaskRun's pod, in Tekton's pod informer: Tekton takes it when its create finds the name taken")
			refused(tenant.Create(ctx, testPod(free, "own-v-pod", "app", labelled("app.kubernetes.io/managed-by", "tekton-pipelines"))),
				"may not create pods own-v-pod", "named as Tekton names a TaskRun's pod, the label app.kubernetes.io/managed-by")
			named := testPod(free, "own-w-pod-retry1", "app")
			admitted(tenant.Create(ctx, named))
			refused(update(tenant, named, func(p *corev1.Pod) { p.Labels = map[string]string{"app.kubernetes.io/managed-by": "Helm"} }),
				"or the label app.kubernetes.io/managed-by of a pod named as Tekton names a TaskRun's")
			admitted(tenant.Create(ctx, testPod(free, "helm-test", "app", labelled("app.kubernetes.io/managed-by", "Helm"))))
			By("a tenant may not label its own TaskRun as a PipelineRun's later")
			mine := &tektonv1.TaskRun{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: free},
				Spec: tektonv1.TaskRunSpec{TaskSpec: &tektonv1.TaskSpec{Steps: []tektonv1.Step{{Name: "s", Image: "busybox"}}}}}
			admitted(tenant.Create(ctx, mine))
			refused(update(tenant, mine, func(t *tektonv1.TaskRun) { t.Labels = map[string]string{"tekton.dev/pipelineRun": "own"} }),
				"may not add or change Tekton's label tekton.dev/pipelineRun")
		})
	})

	Describe("Jobs", func() {
		var job *batchv1.Job

		BeforeAll(func() {
			job = &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "jb-1", Namespace: ns, Labels: opr8rLabels("jb"), OwnerReferences: runOwner},
				Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: opr8rLabels("jb")},
					Spec: corev1.PodSpec{ServiceAccountName: runnerSA, RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "plan", Image: "terraform"}}}}}}
			Expect(k8sClient.Create(ctx, job)).To(Succeed())
		})

		It("refuses a tenant's change of opr8r's Job, even a suspend; the manager drives it", func() {
			refused(update(tenant, job, func(j *batchv1.Job) { j.Spec.Suspend = ptr.To(true) }),
				guardTenant+" may not change opr8r's Job jb-1 (its spec, labels, annotations, ownerReferences or finalizers)", "TerraformRun jb")
			refused(update(tenant, job, func(j *batchv1.Job) { j.Annotations = map[string]string{"note": "x"} }), "may not change opr8r's Job jb-1")
			refused(update(tenant, job, func(j *batchv1.Job) { j.Labels["infra.opr8r.io/settled"] = "true" }), "may not set, change or remove opr8r's labels")
			admitted(update(k8sClient, job, func(j *batchv1.Job) { j.Spec.Suspend = ptr.To(true) }))
			admitted(update(k8sClient, job, func(j *batchv1.Job) { j.Spec.Suspend = ptr.To(false) }))
		})

		It("refuses a tenant's Job or CronJob that runs as the runner or labels its pods as opr8r's; admits its own", func() {
			mk := func(name, sa string) *batchv1.Job {
				return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: free},
					Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{ServiceAccountName: sa, RestartPolicy: corev1.RestartPolicyNever,
						Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}}
			}
			refused(tenant.Create(ctx, mk("sa", runnerSA)), guardTenant+" may not create jobs sa running as runner service account opr8r-runner")
			refused(tenant.Create(ctx, &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "cron", Namespace: free},
				Spec: batchv1.CronJobSpec{Schedule: "* * * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: mk("", runnerSA).Spec}}}),
				"may not create cronjobs cron running as runner service account")
			l := mk("labels", "app")
			l.Spec.Template.Labels = map[string]string{"infra.opr8r.io/step": "plan"}
			refused(tenant.Create(ctx, l), "may not set, change or remove opr8r's labels or annotations (infra.opr8r.io/) on jobs labels or the Jobs and pods it makes")
			admitted(tenant.Create(ctx, mk("own", "app")))
		})

		It("lets only the Job controller make pods the Job controller would count and adopt, labelled with the uid of the Job that controls them", func() {
			own := &batchv1.Job{}
			Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: free, Name: "own"}, own)).To(Succeed())
			uid := string(own.UID)
			refused(tenant.Create(ctx, testPod(free, "own-x", "app", labelled("batch.kubernetes.io/controller-uid", uid))),
				guardTenant+" may not create pod own-x carrying the label batch.kubernetes.io/controller-uid", "only the Job controller")
			refused(tenant.Create(ctx, testPod(free, "own-y", "app", ownedBy("batch/v1", "Job", "own", own.UID))), "an ownerReference to a Job")
			refused(jobCtl.Create(ctx, testPod(free, "own-z", "app", labelled("batch.kubernetes.io/controller-uid", string(job.UID)), ownedBy("batch/v1", "Job", "own", own.UID))),
				"the Job controller may not create pod own-z labelled with controller uid", "a Job's template may not name another Job's uid")
			p := testPod(free, "own-ok", "app", labelled("batch.kubernetes.io/controller-uid", uid, "controller-uid", uid), ownedBy("batch/v1", "Job", "own", own.UID))
			admitted(jobCtl.Create(ctx, p))
			plain := testPod(free, "plain-2", "app")
			admitted(tenant.Create(ctx, plain))
			refused(update(tenant, plain, func(q *corev1.Pod) { q.Labels = map[string]string{"batch.kubernetes.io/controller-uid": uid} }),
				"may not add or change the label batch.kubernetes.io/controller-uid", "the Job controller would adopt it")
			admitted(patch(jobCtl, plain, func(q *corev1.Pod) {
				q.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "own", UID: own.UID, Controller: ptr.To(true)}}
			}))
		})
	})

	Describe("runner pods and credentials", func() {
		It("lets only engine controllers make runner pods, and pods with opr8r's labels", func() {
			refused(tenant.Create(ctx, testPod(free, "r1", runnerSA)), guardTenant+" may not create pod r1 running as runner service account opr8r-runner",
				"only engine controllers (ConfigMap opr8r-identities, engineControllers) make runner pods")
			refused(tenant.Create(ctx, testPod(free, "r2", "", func(p *corev1.Pod) { p.Spec.DeprecatedServiceAccount = runnerSA })), "running as runner service account opr8r-runner")
			refused(tenant.Create(ctx, testPod(free, "l1", "app", labelled("infra.opr8r.io/run", "net"))), "may not create pod l1 carrying opr8r's labels or annotations")
			admitted(argo.Create(ctx, testPod(free, "r3", runnerSA)))
			By("the statefulset controller makes Tekton's affinity assistant's pod, with the PipelineRun's labels")
			admitted(impersonate(ssUser).Create(ctx, testPod(free, "affinity-assistant-0", "app", labelled("infra.opr8r.io/run", "tk"))))
			admitted(tenant.Create(ctx, testPod(free, "app-1", "app")))
		})

		It("refuses a tenant's change of a runner pod; its engine, the garbage collector and the manager change it", func() {
			p := testPod(free, "r4", runnerSA, labelled("infra.opr8r.io/run", "net"), ownedBy("batch/v1", "Job", "jb-x", "00000000-0000-0000-0000-00000000b0b0"))
			admitted(jobCtl.Create(ctx, p))
			refused(update(tenant, p, func(q *corev1.Pod) { q.Spec.Containers[0].Image = "evil:latest" }),
				guardTenant+" may not change pod r4 (its spec, labels, annotations, ownerReferences or finalizers): it runs as runner service account opr8r-runner")
			refused(update(tenant, p, func(q *corev1.Pod) {
				q.Annotations = map[string]string{"workflows.argoproj.io/kill-cmd-step": `["sh","-c","cat /var/run/secrets/kubernetes.io/serviceaccount/token"]`}
			}), "may not change pod r4")
			refused(update(tenant, p, func(q *corev1.Pod) { q.Finalizers = []string{"guard.test/hold"} }), "may not change pod r4")
			refused(update(argo, p, func(q *corev1.Pod) { q.Labels["infra.opr8r.io/run"] = "other" }), argoUser+" may not set, change or remove opr8r's labels or annotations (infra.opr8r.io/) on pod r4")
			admitted(update(tektonC, p, func(q *corev1.Pod) { q.Annotations = map[string]string{"tekton.dev/ready": "READY"} }))
			admitted(update(gc, p, func(q *corev1.Pod) { q.OwnerReferences = nil }))
			admitted(update(k8sClient, p, func(q *corev1.Pod) { q.Labels["infra.opr8r.io/settled"] = "true" }))

			By("an ephemeral container: edit has no right to add one; whoever has is refused on a runner pod; the manager may")
			Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}}}
			_, err := kubernetes.NewForConfigOrDie(tenantCfg).CoreV1().Pods(free).UpdateEphemeralContainers(ctx, p.Name, p, metav1.UpdateOptions{})
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring(`cannot update resource "pods/ephemeralcontainers"`))
			Expect(k8sClient.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "guard-debug", Namespace: free},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods/ephemeralcontainers"}, Verbs: []string{"update", "patch"}}}})).To(Succeed())
			Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "guard-debug", Namespace: free},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "guard-debug"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "guard-debugger"}}})).To(Succeed())
			bound(free, "guard-debugger", "", "pods/ephemeralcontainers", "update")
			dcfg, _ := impersonating("guard-debugger", nil)
			_, err = kubernetes.NewForConfigOrDie(dcfg).CoreV1().Pods(free).UpdateEphemeralContainers(ctx, p.Name, p, metav1.UpdateOptions{})
			refused(err, "guard-debugger may not add an ephemeral container (kubectl debug) to pod r4: it runs as runner service account opr8r-runner")
			_, err = kubernetes.NewForConfigOrDie(cfg).CoreV1().Pods(free).UpdateEphemeralContainers(ctx, p.Name, p, metav1.UpdateOptions{})
			admitted(err)
		})

		It("lets only the kubelet mint a runner's token; refuses a runner's token Secret and changes of the runner ServiceAccount", func() {
			tenantCS := kubernetes.NewForConfigOrDie(tenantCfg)
			req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"sts.example.com"}}}
			_, err := tenantCS.CoreV1().ServiceAccounts(free).CreateToken(ctx, runnerSA, req, metav1.CreateOptions{})
			refused(err, guardTenant+" may not create a token for runner service account "+free+"/opr8r-runner: only the kubelet does")
			_, err = tenantCS.CoreV1().ServiceAccounts(free).CreateToken(ctx, "app", req, metav1.CreateOptions{})
			admitted(err)
			kcfg, _ := impersonating(kubeletUser, nil)
			_, err = kubernetes.NewForConfigOrDie(kcfg).CoreV1().ServiceAccounts(free).CreateToken(ctx, runnerSA, req, metav1.CreateOptions{})
			admitted(err)

			token := func(sa string) *corev1.Secret {
				return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "token-" + sa, Namespace: free, Annotations: map[string]string{"kubernetes.io/service-account.name": sa}},
					Type: corev1.SecretTypeServiceAccountToken}
			}
			refused(tenant.Create(ctx, token(runnerSA)), guardTenant+" may not make Secret token-opr8r-runner a token of runner service account opr8r-runner")
			admitted(tenant.Create(ctx, token("app")))
			refused(update(tenant, token("app"), func(s *corev1.Secret) { s.Annotations["kubernetes.io/service-account.name"] = runnerSA }), "a token of runner service account")

			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: runnerSA, Namespace: free}}
			refused(update(tenant, sa, func(s *corev1.ServiceAccount) {
				s.Annotations = map[string]string{"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x"}
			}),
				guardTenant+" may not update ServiceAccount "+free+"/opr8r-runner: it is a runner service account")
			refused(tenant.Delete(ctx, sa), "may not delete ServiceAccount "+free+"/opr8r-runner")
			other := newNamespace()
			tenantRoles(other, guardTenant)
			refused(tenant.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: runnerSA, Namespace: other}}), "may not create ServiceAccount "+other+"/opr8r-runner")
			admitted(update(k8sClient, sa, func(s *corev1.ServiceAccount) {
				s.Annotations = map[string]string{"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/runner"}
			}))
			admitted(tenant.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "another", Namespace: other}}))
		})
	})

	Describe("opr8r's active runs, by name (opr8r-guard)", func() {
		It("refuses exec, attach, port-forward and proxy into an active run's pods but to its engine", func() {
			admitted(argo.Create(ctx, testPod(ns, "net-1-plan-1", runnerSA)))
			admitted(tenant.Create(ctx, testPod(ns, "tenant-app", "app")))
			connect := func(c *rest.Config, pod, sub string) error {
				cs := kubernetes.NewForConfigOrDie(c)
				req := cs.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").Name(pod).SubResource(sub)
				if sub == "exec" {
					req = req.Param("command", "sh").Param("stdout", "true")
				}
				return req.Do(ctx).Error()
			}
			for _, sub := range []string{"exec", "attach", "portforward"} {
				refused(connect(tenantCfg, "net-1-plan-1", sub), guardTenant+" may not "+sub+" into pod "+ns+"/net-1-plan-1: it belongs to net-1", "an active run of opr8r")
			}
			err := kubernetes.NewForConfigOrDie(tenantCfg).CoreV1().RESTClient().Get().Namespace(ns).Resource("pods").Name("net-1-plan-1").SubResource("proxy").Do(ctx).Error()
			refused(err, "may not proxy into pod "+ns+"/net-1-plan-1")
			By("the tenant's own pod, and Argo's controller signalling a step, pass admission (and fail further on: envtest runs no kubelet)")
			for _, tc := range []struct {
				c   *rest.Config
				pod string
			}{{tenantCfg, "tenant-app"}, {func() *rest.Config { c, _ := impersonating(argoUser, nil); return c }(), "net-1-plan-1"}} {
				err := connect(tc.c, tc.pod, "exec")
				Expect(err).To(HaveOccurred())
				Expect(err.Error()).NotTo(ContainSubstring("may not exec"))
				Expect(apierrors.IsForbidden(err)).To(BeFalse(), "%v", err)
			}
		})

		It("refuses a tenant's objects named after an active run, and runner pods of no active run", func() {
			refused(tenant.Create(ctx, testPod(ns, "net-1-apply-x", "app")), guardTenant+" may not create pods net-1-apply-x: the name belongs to net-1, an active run of opr8r")
			refused(tenant.Create(ctx, &wfv1.Workflow{ObjectMeta: metav1.ObjectMeta{Name: "tk-1-x", Namespace: ns},
				Spec: wfv1.WorkflowSpec{Entrypoint: "m", Templates: []wfv1.Template{{Name: "m", Container: &corev1.Container{Image: "busybox"}}}}}),
				"may not create workflows tk-1-x: the name belongs to tk-1")
			refused(tenant.Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "jb-1-apply", Namespace: ns},
				Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, ServiceAccountName: "app",
					Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}}), "may not create jobs jb-1-apply: the name belongs to jb-1")
			refused(tenant.Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "jb-1-workspace", Namespace: ns},
				Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}),
				"may not create persistentvolumeclaims jb-1-workspace")
			By("the engines make their children's objects, and the Job controller a runner pod of a step Job")
			admitted(tektonC.Create(ctx, &tektonv1.TaskRun{ObjectMeta: metav1.ObjectMeta{Name: "tk-1-apply", Namespace: ns},
				Spec: tektonv1.TaskRunSpec{ServiceAccountName: runnerSA, TaskSpec: &tektonv1.TaskSpec{Steps: []tektonv1.Step{{Name: "s", Image: "terraform"}}}}}))
			admitted(jobCtl.Create(ctx, testPod(ns, "jb-1-apply-abcde", runnerSA)))
			By("a runner pod that belongs to no active run, even from an engine (a tenant's Workflow that got the runner past the checks of its spec)")
			refused(argo.Create(ctx, testPod(ns, "evil-main-1", runnerSA)),
				argoUser+" may not create pod evil-main-1 running as runner service account opr8r-runner: it belongs to none of opr8r's active runs in "+ns)
			By("Tekton shortens a long TaskRun's name: its pod belongs to the run by the label Tekton copies from the TaskRun")
			admitted(tektonC.Create(ctx, testPod(ns, "tk0123456789abcdef-pod", runnerSA, labelled("tekton.dev/pipelineRun", "tk-1"))))
		})

		It("lets only the manager, and the runner pods of a run with their kubelet-issued tokens, write the run's Secrets and ConfigMaps", func() {
			// The runner Role holds no Secret (the steps go through the
			// manager's state API); an install without it gives the runner
			// config/rbac/runner/without-state-api-rules.yaml, and the
			// policy holds there too.
			Expect(k8sClient.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "without-state-api", Namespace: ns},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "create", "update", "delete"}}}})).To(Succeed())
			Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "without-state-api", Namespace: ns},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "without-state-api"},
				// The runner, and the tenant's own account app with the same rights.
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: runnerSA, Namespace: ns}, {Kind: rbacv1.ServiceAccountKind, Name: "app", Namespace: ns}}})).To(Succeed())
			for _, sa := range []string{runnerSA, "app"} {
				envtestutil.AwaitGrant(GinkgoT(), clientset, ns, "system:serviceaccount:"+ns+":"+sa, nil,
					[]rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}}})
			}
			plan := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "net-1-plan", Namespace: ns}, StringData: map[string]string{"plan.txt": "no changes"}}
			refused(tenant.Create(ctx, plan.DeepCopy()), guardTenant+" may not create secrets net-1-plan: it belongs to net-1, an active run of opr8r",
				"as a runner service account, with the token the kubelet gave the pod")
			refused(runnerIn(ns, "").Create(ctx, plan.DeepCopy()), "may not create secrets net-1-plan", "this token names no pod")
			refused(runnerIn(ns, "net-1-1-plan-1").Create(ctx, plan.DeepCopy()), "pod net-1-1-plan-1 is not one of its pods")
			_, app := impersonating("system:serviceaccount:"+ns+":app", map[string][]string{podNameExtra: {"net-1-plan-1"}})
			refused(app.Create(ctx, plan.DeepCopy()), "may not create secrets net-1-plan")
			By("the plan step's pod writes the readable plan, a run named net-1's child's pod its own")
			admitted(runnerIn(ns, "net-1-plan-1").Create(ctx, plan))
			admitted(runnerIn(ns, "net-1-1-plan-2").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "net-1-1-plan", Namespace: ns}}))
			refused(update(tenant, plan, func(s *corev1.Secret) { s.Data["plan.txt"] = []byte("all fine") }), "may not update secrets net-1-plan")
			refused(tenant.Delete(ctx, plan), "may not delete secrets net-1-plan")
			inputs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "tk-1-inputs", Namespace: ns}}
			admitted(k8sClient.Create(ctx, inputs))
			refused(update(tenant, inputs, func(c *corev1.ConfigMap) { c.Data = map[string]string{"vars.json": "{}"} }), "may not update configmaps tk-1-inputs: it belongs to tk-1")
			By("the run's TerraformRunRecords alike: its pods write them, not a tenant acting as the runner (kubectl --as names no pod)")
			Expect(k8sClient.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "records", Namespace: ns},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{infrav1.GroupVersion.Group}, Resources: []string{"terraformrunrecords"}, Verbs: []string{"create", "get", "update", "delete"}}}})).To(Succeed())
			Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "records", Namespace: ns},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "records"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: runnerSA, Namespace: ns}}})).To(Succeed())
			envtestutil.AwaitGrant(GinkgoT(), clientset, ns, "system:serviceaccount:"+ns+":"+runnerSA, nil,
				[]rbacv1.PolicyRule{{APIGroups: []string{infrav1.GroupVersion.Group}, Resources: []string{"terraformrunrecords"}, Verbs: []string{"create"}}})
			record := &infrav1.TerraformRunRecord{ObjectMeta: metav1.ObjectMeta{Name: "net-1-rec-0123456789-0", Namespace: ns},
				Spec: infrav1.TerraformRunRecordSpec{Run: "net", RunID: "net-1", Step: "plan", Kind: infrav1.RecordKind("plan.txt"),
					Chunk: 0, Chunks: 1, SHA256: strings.Repeat("0", 64), Data: []byte("x")}}
			refused(runnerIn(ns, "").Create(ctx, record.DeepCopy()), "may not create terraformrunrecords net-1-rec-0123456789-0", "this token names no pod")
			admitted(runnerIn(ns, "net-1-plan-1").Create(ctx, record))
			refused(runnerIn(ns, "").Delete(ctx, record), "may not delete terraformrunrecords net-1-rec-0123456789-0")
			By("the manager, and the garbage collector deleting a deleted child's Secrets")
			admitted(update(k8sClient, plan, func(s *corev1.Secret) { s.Labels = map[string]string{"infra.opr8r.io/component": "plan"} }))
			admitted(gc.Delete(ctx, plan))
			By("a guard list without the runner service accounts lets no runner write: it fails closed, saying why")
			bare := newNamespace()
			Expect(k8sClient.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "opr8r-guard", Namespace: bare}, Data: map[string]string{"children": "net-1"}})).To(Succeed())
			Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "runner", Namespace: bare},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:aggregate-to-edit"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: runnerSA, Namespace: bare}}})).To(Succeed())
			refused(runnerIn(bare, "net-1-plan-1").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "net-1-plan", Namespace: bare}}),
				"ConfigMap opr8r-guard lists no runnerServiceAccounts: opr8r's manager must copy them there from opr8r-identities")
			By("a kept state (a record of kind errored.tfstate), which the next run's restore-state pushes to the backend as the runner: only the pods of the child that keeps it write one, active run or not")
			keptRecord := func(name, run, runID string) *corev1.Secret {
				return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
					"infra.opr8r.io/component": "record", "infra.opr8r.io/run": run, "infra.opr8r.io/run-id": runID,
					"infra.opr8r.io/step": "apply", "infra.opr8r.io/record-kind": "errored.tfstate"}},
					Data: map[string][]byte{"chunk": []byte("x")}}
			}
			old := keptRecord("net-0-rec-0123456789-0", "net", "net-0")
			refused(tenant.Create(ctx, old.DeepCopy()), guardTenant+" may not create secrets net-0-rec-0123456789-0: a Secret labelled infra.opr8r.io/record-kind=errored.tfstate holds a state an apply of TerraformRun net kept")
			refused(runnerIn(ns, "").Create(ctx, old.DeepCopy()), "may not create secrets net-0-rec-0123456789-0")
			refused(runnerIn(ns, "net-1-apply-1").Create(ctx, old.DeepCopy()), "only the pods of the run that keeps it")
			admitted(k8sClient.Create(ctx, old))
			refused(update(tenant, old, func(s *corev1.Secret) { s.Data = map[string][]byte{"chunk": []byte(`{"serial": 99}`)} }), "may not update secrets net-0-rec-0123456789-0")
			admitted(tenant.Delete(ctx, old))
			own := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: ns}}
			admitted(tenant.Create(ctx, own))
			refused(update(tenant, own, func(s *corev1.Secret) {
				s.Labels = map[string]string{"infra.opr8r.io/component": "record", "infra.opr8r.io/run": "net", "infra.opr8r.io/run-id": "net-1", "infra.opr8r.io/record-kind": "errored.tfstate"}
			}), "may not update secrets mine")
			By("a runner pod of another run, of no active child, or of a run whose name is the kept state's run's plus -<n>, may not plant one (issue 49: a runner token planted a kept state for another run, which its rerun pushed)")
			kept := keptRecord("net-1-rec-0123456789-0", "net", "net-1")
			refused(runnerIn(ns, "tk-1-apply-1").Create(ctx, kept.DeepCopy()), "may not create secrets net-1-rec-0123456789-0")
			refused(runnerIn(ns, "net-0-apply-1").Create(ctx, keptRecord("net-0-rec-0123456789-0", "net", "net-0")), "only the pods of the run that keeps it")
			refused(runnerIn(ns, "net-1-1-apply-1").Create(ctx, keptRecord("net-1-1-rec-0123456789-0", "net", "net-1-1")), "only the pods of the run that keeps it")
			admitted(runnerIn(ns, "net-1-apply-1").Create(ctx, kept))
			refused(update(runnerIn(ns, "net-1-apply-1"), kept, func(s *corev1.Secret) { s.Labels["infra.opr8r.io/run-id"] = "net-1-1" }), "only the pods of the run that keeps it")
			refused(update(tenant, kept, func(s *corev1.Secret) { s.Data = map[string][]byte{"chunk": []byte(`{"serial": 99}`)} }), "may not update secrets net-1-rec-0123456789-0")
			By("the tenant's own Secrets, and everything once no run is active")
			admitted(tenant.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "git-credentials", Namespace: ns}}))
			admitted(tenant.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "net-1-plan", Namespace: free}}))
		})
	})
})

func selfAccess(ns, group, resource, sub, verb string) *authorizationv1.SelfSubjectAccessReview {
	return &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
		Namespace: ns, Group: group, Resource: resource, Subresource: sub, Verb: verb}}}
}
