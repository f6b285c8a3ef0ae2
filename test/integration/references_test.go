package integration

import (
	"context"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// Issue 49, 5: a user may name in a TerraformRun, a receiver or a notifier
// only the Secrets and ConfigMaps they may read themselves (opr8r-references);
// a preview's planOnly cannot be changed (opr8r-previews).
var _ = Describe("references: what a user names, they may read", Ordered, func() {
	ctx := context.Background()
	const (
		editor = "ref-editor" // opr8r-editor only: no Secret, no ConfigMap
		tenant = "ref-tenant" // edit: reads every Secret of the namespace
	)
	var ns string

	BeforeAll(func() {
		ns = newNamespace()
		grant(ns, "editor", editor)
		tenantRoles(ns, tenant)
		for _, s := range []string{"db-password", "git-token", "hook-token", "granted"} {
			Expect(k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: s, Namespace: ns},
				StringData: map[string]string{"token": "0123456789abcdef0123", "password": "hunter2"}})).To(Succeed())
		}
		Expect(k8sClient.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "module", Namespace: ns}, Data: map[string]string{"main.tf": ""}})).To(Succeed())
		By("the editor may read one Secret by name")
		Expect(k8sClient.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "read-granted", Namespace: ns},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"granted"}, Verbs: []string{"get"}}}})).To(Succeed())
		Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "read-granted", Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "read-granted"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: editor}}})).To(Succeed())
		Eventually(func() error {
			r := testRun("probe", ns)
			r.Spec.Terraform.VarsFrom = []infrav1.VarsFromSource{{Kind: "Secret", Name: "granted"}}
			err := as(editor).Create(ctx, r)
			if err == nil {
				_ = k8sClient.Delete(ctx, r)
			}
			return err
		}, timeout, interval).Should(Succeed())
	})

	It("refuses a run that names a Secret its writer may not read, in every field that names one, saying which and why", func() {
		for field, mutate := range map[string]func(*infrav1.TerraformRun){
			"spec.terraform.varsFrom": func(r *infrav1.TerraformRun) {
				r.Spec.Terraform.VarsFrom = []infrav1.VarsFromSource{{Kind: "Secret", Name: "db-password"}}
			},
			"spec.terraform.env": func(r *infrav1.TerraformRun) {
				r.Spec.Terraform.Env = []infrav1.SecretEnvVar{{Name: "TF_VAR_pw", SecretKeyRef: infrav1.SecretKeyRef{Name: "db-password", Key: "password"}}}
			},
			"spec.terraform.files": func(r *infrav1.TerraformRun) {
				r.Spec.Terraform.Files = []infrav1.SecretFile{{SecretName: "db-password", MountPath: "/secrets/db"}}
			},
			"spec.backend.configSecretRef": func(r *infrav1.TerraformRun) {
				r.Spec.Backend = &infrav1.BackendSpec{ConfigSecretRef: &infrav1.BackendConfigRef{Type: "s3", Name: "db-password"}}
			},
		} {
			r := testRun("named", ns)
			mutate(r)
			refused(as(editor).Create(ctx, r), field, "names Secret db-password, which "+editor+" may not read", "get secrets in namespace "+ns)
		}
		st := testRun("other-state", ns)
		st.Spec.Backend = &infrav1.BackendSpec{Kubernetes: &infrav1.KubernetesBackend{SecretSuffix: "prod-db"}}
		refused(as(editor).Create(ctx, st), "spec.backend.kubernetes.secretSuffix", "names Secret tfstate-default-prod-db, which "+editor+" may not read")
		r := testRun("cm-source", ns)
		r.Spec.Source = infrav1.Source{ConfigMapRef: &infrav1.LocalObjectReference{Name: "module"}}
		refused(as(editor).Create(ctx, r), "spec.source.configMapRef", "names ConfigMap module, which "+editor+" may not read")
	})

	It("admits what its writer may read: a tenant with edit, or a Secret granted by name", func() {
		r := testRun("tenants", ns)
		r.Spec.Terraform.VarsFrom = []infrav1.VarsFromSource{{Kind: "Secret", Name: "db-password"}}
		admitted(as(tenant).Create(ctx, r))
		g := testRun("granted", ns)
		g.Spec.Terraform.Env = []infrav1.SecretEnvVar{{Name: "TF_VAR_x", SecretKeyRef: infrav1.SecretKeyRef{Name: "granted", Key: "token"}}}
		admitted(as(editor).Create(ctx, g))

		By("an edit of another field keeps the names already there; adding one is asked about as new")
		admitted(patch(as(editor), r, func(r *infrav1.TerraformRun) { r.Spec.Suspend = false }))
		refused(patch(as(editor), r, func(r *infrav1.TerraformRun) {
			r.Spec.Terraform.Files = []infrav1.SecretFile{{SecretName: "git-token", MountPath: "/secrets/git"}}
		}), "names Secret git-token")
		refused(patch(as(editor), g, func(r *infrav1.TerraformRun) { r.Spec.Terraform.Env[0].SecretKeyRef.Name = "db-password" }), "names Secret db-password")

		By("a name moved to another field is asked about again: a clone's credentials into files, which module code reads")
		c := testRun("creds", ns)
		c.Spec.Source = infrav1.Source{Git: &infrav1.GitSource{URL: "https://git.example.com/infra.git", CredentialsSecretRef: &infrav1.LocalObjectReference{Name: "git-token"}}}
		admitted(as(tenant).Create(ctx, c))
		refused(patch(as(editor), c, func(r *infrav1.TerraformRun) {
			r.Spec.Terraform.Files = []infrav1.SecretFile{{SecretName: "git-token", MountPath: "/secrets/git"}}
		}), "names Secret git-token")
	})

	It("refuses a receiver or a notifier whose Secret its writer may not read (the forge token, the destination)", func() {
		rcv := &infrav1.TerraformRunReceiver{ObjectMeta: metav1.ObjectMeta{Name: "hooks", Namespace: ns},
			Spec: infrav1.TerraformRunReceiverSpec{Type: infrav1.ReceiverGitea, SecretRef: infrav1.LocalObjectReference{Name: "granted"},
				Previews: &infrav1.ReceiverPreviews{APIURL: "https://gitea.example.com", TokenSecretRef: &infrav1.LocalObjectReference{Name: "db-password"}}}}
		refused(as(editor).Create(ctx, rcv.DeepCopy()), "spec.previews.githubApp.privateKeySecretRef (read again when spec.type or spec.previews.apiURL changes: the token goes there) names Secret granted, db-password, one of which "+editor+" may not read")
		rcv.Spec.Previews.TokenSecretRef.Name = "granted"
		admitted(as(editor).Create(ctx, rcv))
		n := &infrav1.TerraformRunNotifier{ObjectMeta: metav1.ObjectMeta{Name: "chat", Namespace: ns},
			Spec: infrav1.TerraformRunNotifierSpec{Type: infrav1.NotifierSlack, SecretRef: infrav1.LocalObjectReference{Name: "hook-token"}}}
		refused(as(editor).Create(ctx, n.DeepCopy()), "spec.secretRef names Secret hook-token")
		admitted(as(tenant).Create(ctx, n))

		By("an editor may not send a receiver's forge token elsewhere: its API address, its type, or the webhook's token moved to the forge's")
		gh := &infrav1.TerraformRunReceiver{ObjectMeta: metav1.ObjectMeta{Name: "gh", Namespace: ns},
			Spec: infrav1.TerraformRunReceiverSpec{Type: infrav1.ReceiverGitHub, SecretRef: infrav1.LocalObjectReference{Name: "hook-token"},
				Previews: &infrav1.ReceiverPreviews{TokenSecretRef: &infrav1.LocalObjectReference{Name: "git-token"}}}}
		admitted(as(tenant).Create(ctx, gh))
		refused(patch(as(editor), gh, func(r *infrav1.TerraformRunReceiver) { r.Spec.Previews.APIURL = "https://evil.example/api/v3" }), "names Secret git-token")
		refused(patch(as(editor), gh, func(r *infrav1.TerraformRunReceiver) { r.Spec.Previews.TokenSecretRef.Name = "hook-token" }), "names Secret hook-token")
		admitted(patch(as(editor), gh, func(r *infrav1.TerraformRunReceiver) { r.Spec.Previews.MaxPerRun = 3 }))
	})

	It("keeps a preview a preview: nobody but the manager sets its planOnly to false or unmarks it", func() {
		p := testRun("web-pr7", ns)
		p.Labels = map[string]string{infrav1.PreviewOfLabel: "web", infrav1.PullRequestLabel: "7"}
		p.Annotations = map[string]string{infrav1.PreviewAnnotation: `{"receiver":"hooks","number":7}`}
		p.Spec.PlanOnly = true
		admitted(k8sClient.Create(ctx, p))
		refused(patch(as(tenant), p, func(r *infrav1.TerraformRun) { r.Spec.PlanOnly = false }),
			tenant+" may not set spec.planOnly to false on pull-request preview web-pr7")
		refused(patch(as(editor), p, func(r *infrav1.TerraformRun) { delete(r.Labels, infrav1.PreviewOfLabel) }), "nor change or remove its label preview.opr8r.io/of")
		refused(patch(as(editor), p, func(r *infrav1.TerraformRun) { delete(r.Annotations, infrav1.PreviewAnnotation) }), "annotation infra.opr8r.io/preview")
		admitted(patch(as(editor), p, func(r *infrav1.TerraformRun) { r.Spec.Suspend = false }))
		By("the count of tries to tell the forge it closed is the manager's: a tenant's would hold its deletion (TestTenantCloseAttemptsAnnotationHoldsNoDeletion)")
		refused(patch(as(editor), p, func(r *infrav1.TerraformRun) { r.Annotations[infrav1.PreviewCloseAttemptsAnnotation] = "-1000000" }),
			"nor its annotation infra.opr8r.io/preview-close-attempts")
		admitted(patch(k8sClient, p, func(r *infrav1.TerraformRun) { r.Annotations[infrav1.PreviewCloseAttemptsAnnotation] = "1" }))
		refused(patch(as(tenant), p, func(r *infrav1.TerraformRun) { delete(r.Annotations, infrav1.PreviewCloseAttemptsAnnotation) }),
			"infra.opr8r.io/preview-close-attempts")
		By("the manager moves it")
		admitted(patch(k8sClient, p, func(r *infrav1.TerraformRun) {
			r.Annotations[infrav1.PreviewAnnotation] = `{"receiver":"hooks","number":7,"head":"b"}`
		}))
	})

	It("keeps the push annotations the manager's: an editor neither fakes a forge's push nor has a commit taken without a plan", func() {
		r := testRun("pushed", ns)
		r.Annotations = map[string]string{infrav1.SourcePushAnnotation: strings.Repeat("a", 40)}
		refused(as(editor).Create(ctx, r.DeepCopy()), editor+" may not set annotations infra.opr8r.io/source-push")
		r.Annotations = nil
		admitted(as(editor).Create(ctx, r))
		refused(patch(as(editor), r, func(r *infrav1.TerraformRun) {
			r.Annotations = map[string]string{infrav1.SourcePushAnnotation: strings.Repeat("b", 40)}
		}), "infra.opr8r.io/source-push")
		refused(patch(as(tenant), r, func(r *infrav1.TerraformRun) {
			r.Annotations = map[string]string{infrav1.SourcePushSkippedAnnotation: strings.Repeat("b", 40) + " no file matched"}
		}), "infra.opr8r.io/source-push-skipped")
		By("the manager (a receiver) writes them; anyone may remove them")
		admitted(patch(k8sClient, r, func(r *infrav1.TerraformRun) {
			r.Annotations = map[string]string{infrav1.SourcePushAnnotation: strings.Repeat("c", 40), infrav1.SourcePushSkippedAnnotation: strings.Repeat("c", 40) + " no file matched"}
		}))
		admitted(patch(as(editor), r, func(r *infrav1.TerraformRun) { r.Spec.Suspend = true }))
		admitted(patch(as(editor), r, func(r *infrav1.TerraformRun) { delete(r.Annotations, infrav1.SourcePushSkippedAnnotation) }))
	})
})
