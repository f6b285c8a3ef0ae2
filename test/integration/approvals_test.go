package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/test/envtestutil"
)

// Users are envtest users with their own client certificates; the API
// server's real authenticator and RBAC authorizer decide what they may do,
// and opr8r's admission policies stamp who they are.
var (
	usersMu     sync.Mutex
	users       = map[string]client.Client{}
	userConfigs = map[string]*rest.Config{}
)

// as returns a client that authenticates as user, in the given groups.
func as(user string, groups ...string) client.Client {
	asConfig(user, groups...)
	usersMu.Lock()
	defer usersMu.Unlock()
	return users[user]
}

// asConfig returns the REST config of user (made on first use, with groups).
func asConfig(user string, groups ...string) *rest.Config {
	usersMu.Lock()
	defer usersMu.Unlock()
	if c, ok := userConfigs[user]; ok {
		return c
	}
	u, err := testEnv.ControlPlane.AddUser(envtest.User{Name: user, Groups: groups}, nil)
	Expect(err).NotTo(HaveOccurred())
	c, err := client.New(u.Config(), client.Options{Scheme: k8sClient.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	users[user], userConfigs[user] = c, u.Config()
	return u.Config()
}

// grant binds one of opr8r's user roles (config/rbac/users) to user in ns.
func grant(ns, role, user string) {
	ctx := context.Background()
	b, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), "config", "rbac", "users", role+".yaml"))
	Expect(err).NotTo(HaveOccurred())
	cr := &rbacv1.ClusterRole{}
	Expect(yaml.Unmarshal(b, cr)).To(Succeed())
	if err := k8sClient.Create(ctx, cr); err != nil && !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
	Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role + "-" + user, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	})).To(Succeed())
	for _, r := range cr.Rules {
		if len(r.APIGroups) > 0 && len(r.Resources) > 0 && len(r.Verbs) > 0 && len(r.ResourceNames) == 0 {
			// A binding reaches the authorizer with all its role's rules.
			bound(ns, user, r.APIGroups[0], r.Resources[0], r.Verbs[0])
			break
		}
	}
}

// bound waits until the API server's RBAC authorizer, which reads roles and
// bindings from an informer, lets user verb resource (a "pods/exec" form
// names a subresource) of group in ns. A request sent right after a
// binding's create may be refused by RBAC still, not by the admission
// policy the test means to reach (a clean-clone CI run, stop 42:
// guard-debugger's ephemeral container was refused with "cannot update
// resource" 20 ms after its RoleBinding).
func bound(ns, user, group, resource, verb string) {
	GinkgoHelper()
	attrs := &authorizationv1.ResourceAttributes{Namespace: ns, Group: group, Verb: verb}
	attrs.Resource, attrs.Subresource, _ = strings.Cut(resource, "/")
	Eventually(func() (bool, error) {
		sar, err := clientset.AuthorizationV1().SubjectAccessReviews().Create(context.Background(),
			&authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: attrs}}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return sar.Status.Allowed, nil
	}, timeout, interval).Should(BeTrue(), "RBAC lets %s %s %s in %s", user, verb, resource, ns)
}

// decide creates a TerraformRunApproval as c, as kubectl tfrun does.
func decide(c client.Client, ns, run, digest string, d infrav1.Decision, reason string) (*infrav1.TerraformRunApproval, error) {
	a := &infrav1.TerraformRunApproval{
		ObjectMeta: metav1.ObjectMeta{GenerateName: run + "-", Namespace: ns},
		Spec:       infrav1.TerraformRunApprovalSpec{RunName: run, PlanDigest: digest, Decision: d, Reason: reason},
	}
	return a, c.Create(context.Background(), a)
}

func approvals(ns, name string) func() string {
	return func() string {
		if a := getRun(ns, name).Status.Approvals; a != nil {
			return a.Summary + " " + strings.Join(a.ApprovedBy, ",")
		}
		return ""
	}
}

// Identity and the separation of the rights to edit and to approve do not
// depend on the engine: they are the API server's (RBAC, admission).
var _ = Describe("approval identity and rights", func() {
	ctx := context.Background()

	It("stamps the requesting user on a decision and refuses a forged one", func() {
		ns := newNamespace()
		grant(ns, "approver", "id-alice")
		alice := as("id-alice", "sre")
		a, err := decide(alice, ns, "any", digestOf("x"), infrav1.DecisionApprove, "")
		Expect(err).NotTo(HaveOccurred())
		Expect(a.Spec.User).To(Equal("id-alice"))
		Expect(a.Spec.Groups).To(ContainElements("sre", "system:authenticated"))

		By("a user typed into spec.user that is not the requester is refused")
		forged := &infrav1.TerraformRunApproval{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "any-", Namespace: ns},
			Spec:       infrav1.TerraformRunApprovalSpec{RunName: "any", PlanDigest: digestOf("x"), User: "id-bob"},
		}
		err = alice.Create(ctx, forged)
		Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("spec.user must be the requesting user, id-alice"))

		By("a decision never changes")
		patch := client.MergeFrom(a.DeepCopy())
		a.Spec.Decision = infrav1.DecisionReject
		err = k8sClient.Patch(ctx, a, patch)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("spec is immutable"))
	})

	It("stamps the author of a change and refuses a forged author", func() {
		ns := newNamespace()
		grant(ns, "editor", "id-carol")
		carol := as("id-carol")
		run := testRun("authored", ns)
		Expect(carol.Create(ctx, run)).To(Succeed())
		Expect(run.Annotations).To(HaveKeyWithValue(infrav1.SpecAuthorAnnotation, "id-carol"))

		By("another writer's spec change makes them the author")
		patchRun(ns, "authored", func(r *infrav1.TerraformRun) { r.Spec.History.KeepRecords = ptrTo(int32(3)) })
		Expect(getRun(ns, "authored").Annotations[infrav1.SpecAuthorAnnotation]).NotTo(Equal("id-carol"))

		By("an author typed by hand is refused")
		got := getRun(ns, "authored")
		p := client.MergeFrom(got.DeepCopy())
		got.Annotations[infrav1.SpecAuthorAnnotation] = "someone-else"
		err := carol.Patch(ctx, got, p)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("metadata.annotations[infra.opr8r.io/spec-author] is stamped at admission"))
	})

	It("keeps every author of a change since the last apply, refuses a typed list and restores one left out", func() {
		ns := newNamespace()
		grant(ns, "editor", "sa-trent")
		grant(ns, "editor", "sa-mallory")
		trent, mallory := as("sa-trent"), as("sa-mallory")
		run := testRun("authors", ns)
		Expect(trent.Create(ctx, run)).To(Succeed())
		Expect(run.Annotations).To(HaveKeyWithValue(infrav1.SpecAuthorsAnnotation, "1 sa-trent"))

		By("a colleague's change adds them; it does not replace the first author")
		got := getRun(ns, "authors")
		p := client.MergeFrom(got.DeepCopy())
		got.Spec.Terraform.Vars = append(got.Spec.Terraform.Vars, infrav1.Variable{Name: "extra", Value: apiextensionsv1.JSON{Raw: []byte(`"1"`)}})
		Expect(mallory.Patch(ctx, got, p)).To(Succeed())
		Expect(getRun(ns, "authors").Annotations).To(HaveKeyWithValue(infrav1.SpecAuthorsAnnotation, "1 sa-trent\n2 sa-mallory"))

		By("a list typed by hand is refused, naming the annotation")
		got = getRun(ns, "authors")
		p = client.MergeFrom(got.DeepCopy())
		got.Annotations[infrav1.SpecAuthorsAnnotation] = "1 nobody"
		err := mallory.Patch(ctx, got, p)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("metadata.annotations[infra.opr8r.io/spec-authors] is kept at admission"))

		By("a write that leaves the annotation out (kubectl replace of a manifest) keeps the list")
		got = getRun(ns, "authors")
		delete(got.Annotations, infrav1.SpecAuthorsAnnotation)
		Expect(mallory.Update(ctx, got)).To(Succeed())
		Expect(getRun(ns, "authors").Annotations).To(HaveKeyWithValue(infrav1.SpecAuthorsAnnotation, "1 sa-trent\n2 sa-mallory"))
	})

	It("stamps who asks for a rerun and refuses a typed requester", func() {
		ns := newNamespace()
		grant(ns, "editor", "rq-trent")
		grant(ns, "editor", "rq-mallory")
		trent, mallory := as("rq-trent"), as("rq-mallory")
		Expect(trent.Create(ctx, testRun("asked", ns))).To(Succeed())

		By("mallory asks for a rerun (kubectl tfrun rerun's patch): she is stamped")
		got := getRun(ns, "asked")
		p := client.MergeFrom(got.DeepCopy())
		got.Annotations[infrav1.RunRequestAnnotation] = "2026-12-07T16:00:00Z"
		Expect(mallory.Patch(ctx, got, p)).To(Succeed())
		Expect(getRun(ns, "asked").Annotations).To(HaveKeyWithValue(infrav1.RunRequestedByAnnotation, "rq-mallory"))

		By("a requester typed by hand is refused, naming the annotation")
		got = getRun(ns, "asked")
		p = client.MergeFrom(got.DeepCopy())
		got.Annotations[infrav1.RunRequestedByAnnotation] = "rq-trent"
		err := mallory.Patch(ctx, got, p)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("metadata.annotations[infra.opr8r.io/run-requested-by] is stamped at admission"))
		got = getRun(ns, "asked")
		p = client.MergeFrom(got.DeepCopy())
		got.Annotations[infrav1.RunRequestAnnotation] = "2026-12-07T16:05:00Z"
		got.Annotations[infrav1.RunRequestedByAnnotation] = "rq-trent"
		Expect(mallory.Patch(ctx, got, p)).To(Succeed(), "the mutating policy stamps over a typed value on a new request")
		Expect(getRun(ns, "asked").Annotations).To(HaveKeyWithValue(infrav1.RunRequestedByAnnotation, "rq-mallory"))

	})

	It("grants approving and editing apart: an approver cannot edit, an editor cannot approve", func() {
		ns := newNamespace()
		grant(ns, "approver", "rights-approver")
		grant(ns, "editor", "rights-editor")
		approver, editor := as("rights-approver"), as("rights-editor")
		run := testRun("split", ns)
		Expect(editor.Create(ctx, run)).To(Succeed())

		By("the approver decides, and cannot change the run")
		_, err := decide(approver, ns, "split", digestOf("split"), infrav1.DecisionApprove, "")
		Expect(err).NotTo(HaveOccurred())
		got := &infrav1.TerraformRun{}
		Expect(approver.Get(ctx, client.ObjectKeyFromObject(run), got)).To(Succeed())
		p := client.MergeFrom(got.DeepCopy())
		got.Spec.History.KeepRecords = ptrTo(int32(2))
		Expect(apierrors.IsForbidden(approver.Patch(ctx, got, p))).To(BeTrue())
		p = client.MergeFrom(got.DeepCopy())
		got.Spec.Approval.ApprovedPlan = digestOf("split")
		Expect(apierrors.IsForbidden(approver.Patch(ctx, got, p))).To(BeTrue())

		By("the editor changes the run, and cannot decide by either path")
		_, err = decide(editor, ns, "split", digestOf("split"), infrav1.DecisionApprove, "")
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		Expect(editor.Get(ctx, client.ObjectKeyFromObject(run), got)).To(Succeed())
		p = client.MergeFrom(got.DeepCopy())
		got.Spec.History.KeepRecords = ptrTo(int32(2))
		Expect(editor.Patch(ctx, got, p)).To(Succeed())
		p = client.MergeFrom(got.DeepCopy())
		got.Spec.Approval.ApprovedPlan = digestOf("split")
		err = editor.Patch(ctx, got, p)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("needs the right to create terraformrunapprovals in namespace " + ns))
	})
})

func testRun(name, ns string) *infrav1.TerraformRun {
	r := given{engineCases[0]}.run(name, ns).Obj()
	r.Spec.Suspend = true
	return r
}

func ptrTo[T any](v T) *T { return &v }

// approvalPolicy is the conformance suite's part on approvals: the policy
// in spec.approval, counted from TerraformRunApprovals of real users.
func approvalPolicy(g given) {
	It("needs two distinct users for a quorum of two: one user twice is not enough", func() {
		ns := newNamespace()
		grant(ns, "approver", "q-alice")
		grant(ns, "approver", "q-bob")
		digest := digestOf("quorum")
		run := g.run("quorum", ns).Obj()
		run.Spec.Approval.RequiredApprovals = 2
		s := g.planned(ns, run, digest)
		_, err := decide(as("q-alice"), ns, run.Name, digest, infrav1.DecisionApprove, "")
		Expect(err).NotTo(HaveOccurred())
		_, err = decide(as("q-alice"), ns, run.Name, digest, infrav1.DecisionApprove, "")
		Expect(err).NotTo(HaveOccurred())
		Eventually(approvals(ns, run.Name), timeout, interval).Should(Equal("1/2 q-alice"))
		Consistently(gateState(s), 2*time.Second, interval).Should(Equal("Pending"))
		c := cond(getRun(ns, run.Name), infrav1.ApprovedCondition)
		Expect(c.Reason).To(Equal(infrav1.ReasonAwaitingApproval))
		Expect(c.Message).To(ContainSubstring("1/2 approvals (q-alice), 1 more needed"))

		_, err = decide(as("q-bob"), ns, run.Name, digest, infrav1.DecisionApprove, "")
		Expect(err).NotTo(HaveOccurred())
		Eventually(gateState(s), timeout, interval).Should(Equal("Approved"))
		Eventually(condReason(ns, run.Name, infrav1.ApprovedCondition), timeout, interval).Should(Equal("True/Approved"))
		got := getRun(ns, run.Name)
		Expect(got.Status.Approval.By).To(Equal("q-alice, q-bob"))
		Expect(got.Status.Approval.Source).To(Equal(infrav1.ApprovedByApproval))
		Expect(got.Status.Approvals.Summary).To(Equal("2/2"))
		_, msg, _ := s.Gate()
		Expect(msg).To(ContainSubstring("q-alice, q-bob"))
	})

	It("bars the author of the change from approving it", func() {
		ns := newNamespace()
		for _, u := range []string{"a-dave", "a-erin"} {
			grant(ns, "approver", u)
			grant(ns, "editor", u)
		}
		digest := digestOf("author")
		run := g.run("author", ns).Obj()
		run.Spec.Approval.SelfApproval = infrav1.SelfApprovalForbidden
		Expect(as("a-dave").Create(context.Background(), run)).To(Succeed())
		s := g.active(ns, run.Name)
		s.Start()
		s.Plan(1, 0, 0, digest)
		s.Suspend(digest)
		Eventually(phase(ns, run.Name), timeout, interval).Should(Equal(infrav1.RunAwaitingApproval))
		Expect(getRun(ns, run.Name).Status.Run.Author).To(Equal("a-dave"))

		_, err := decide(as("a-dave"), ns, run.Name, digest, infrav1.DecisionApprove, "")
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() string {
			return cond(getRun(ns, run.Name), infrav1.ApprovedCondition).Message
		}, timeout, interval).Should(ContainSubstring("ignored a-dave's decision"))
		got := getRun(ns, run.Name).Status.Approvals
		Expect(got.Ignored).To(HaveLen(1))
		Expect(got.Ignored[0].Reason).To(ContainSubstring("an author of the change may not approve it"))
		Consistently(gateState(s), 2*time.Second, interval).Should(Equal("Pending"))

		_, err = decide(as("a-erin"), ns, run.Name, digest, infrav1.DecisionApprove, "")
		Expect(err).NotTo(HaveOccurred())
		Eventually(gateState(s), timeout, interval).Should(Equal("Approved"))
		// The gate passes before the pass that passed it writes status.
		Eventually(func() string {
			if a := getRun(ns, run.Name).Status.Approval; a != nil {
				return a.By
			}
			return ""
		}, timeout, interval).Should(Equal("a-erin"))
	})

	It("ignores and reports a user not listed, and one listed approver's rejection rejects", func() {
		ns := newNamespace()
		for _, u := range []string{"l-mallory", "l-frank"} {
			grant(ns, "approver", u)
		}
		digest := digestOf("listed")
		run := g.run("listed", ns).Obj()
		run.Spec.Approval.Approvers = &infrav1.Approvers{Users: []string{"l-grace"}, Groups: []string{"l-sre"}}
		s := g.planned(ns, run, digest)
		_, err := decide(as("l-mallory"), ns, run.Name, digest, infrav1.DecisionApprove, "")
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() string {
			return cond(getRun(ns, run.Name), infrav1.ApprovedCondition).Message
		}, timeout, interval).Should(ContainSubstring("ignored l-mallory's decision (TerraformRunApproval/listed-"))
		Expect(cond(getRun(ns, run.Name), infrav1.ApprovedCondition).Message).To(ContainSubstring("not in spec.approval.approvers"))
		Consistently(gateState(s), 2*time.Second, interval).Should(Equal("Pending"))

		By("a member of a listed group rejects: the plan is rejected")
		_, err = decide(as("l-frank", "l-sre"), ns, run.Name, digest, infrav1.DecisionReject, "opens port 22 to the world")
		Expect(err).NotTo(HaveOccurred())
		Eventually(gateState(s), timeout, interval).Should(Equal("Rejected"))
		s.CompleteAfterGate()
		Eventually(phase(ns, run.Name), timeout, interval).Should(Equal(infrav1.RunRejected))
		got := getRun(ns, run.Name)
		Expect(got.Status.Approval.By).To(Equal("l-frank"))
		Expect(got.Status.Approval.Reason).To(Equal("opens port 22 to the world"))
		Expect(got.Status.History[0].Approval.By).To(Equal("l-frank"))
	})
}
