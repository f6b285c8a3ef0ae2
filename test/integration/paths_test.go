package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/receiver"
)

// githubPush is a GitHub push of main from before to after whose one
// commit changed files, as GitHub sends it (forced false, the file lists).
func githubPush(before, after string, files ...string) []byte {
	b, err := json.Marshal(map[string]any{
		"ref": "refs/heads/main", "before": before, "after": after, "forced": false, "created": false, "deleted": false,
		"commits":     []any{map[string]any{"id": after, "message": "change", "added": []string{}, "modified": files, "removed": []string{}}},
		"head_commit": map[string]any{"id": after},
		"repository":  map[string]any{"clone_url": pushRepo, "html_url": strings.TrimSuffix(pushRepo, ".git")},
	})
	Expect(err).NotTo(HaveOccurred())
	return b
}

func signedGitHub(body []byte, delivery string) map[string]string {
	return map[string]string{"X-GitHub-Event": "push", "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": "sha256=" + receiver.Sign(body, []byte(pushToken))}
}

var _ = Describe("path filters (spec.source.git.paths)", func() {
	It("refuses patterns outside the repository's root and exclusions alone, naming the field", func() {
		ns := newNamespace()
		for paths, want := range map[string]string{
			"/stacks/network/**": "no leading '/'",
			"../other/**":        "must not be empty, '.' or '..'",
			"stacks//network":    "must not be empty, '.' or '..'",
			"!**/*.md":           "at least one pattern must not start with '!'",
		} {
			w := given{engineCases[0]}.run("bad", ns).Git(pushRepo, "main", "", "")
			w.Spec.Source.Git.Paths = []infrav1.PathPattern{infrav1.PathPattern(paths)}
			err := k8sClient.Create(context.Background(), w.Obj())
			Expect(err).To(HaveOccurred(), paths)
			Expect(err.Error()).To(ContainSubstring("spec.source.git.paths"), paths)
			Expect(err.Error()).To(ContainSubstring(want), paths)
		}
	})

	It("takes a push that changed only other paths without a plan, and plans one that changed a matched path", func() {
		ctx := context.Background()
		g := given{engineCases[0]}
		ns := newNamespace()
		w := g.run("network", ns).Auto().Git(pushRepo, "main", "stacks/network", "")
		w.Spec.Source.Git.Paths = []infrav1.PathPattern{"stacks/network/**", "modules/**", "!**/*.md"}
		Expect(k8sClient.Create(ctx, w.Obj())).To(Succeed())
		s := g.active(ns, "network")
		s.StartAt(commitA)
		s.Plan(1, 0, 0, digestOf("network-a"))
		s.FinishApply(`{}`)
		Eventually(condReason(ns, "network", infrav1.ReadyCondition), timeout, interval).Should(Equal("True/Succeeded"))
		first := getRun(ns, "network").Status.Run.ID

		Expect(k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: ns}, StringData: map[string]string{"token": pushToken}})).To(Succeed())
		Expect(k8sClient.Create(ctx, &infrav1.TerraformRunReceiver{ObjectMeta: metav1.ObjectMeta{Name: "forge", Namespace: ns},
			Spec: infrav1.TerraformRunReceiverSpec{Type: infrav1.ReceiverGitHub, SecretRef: infrav1.LocalObjectReference{Name: "hook"}}})).To(Succeed())
		var path string
		Eventually(func() string {
			var r infrav1.TerraformRunReceiver
			Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "forge"}, &r)).To(Succeed())
			path = r.Status.WebhookPath
			return path
		}, timeout, interval).ShouldNot(BeEmpty())
		awaitServed(path)

		By("a push that changed only another stack and a README of this one: no plan, the skip in status")
		other := githubPush(commitA, commitB, "stacks/dns/main.tf", "stacks/network/README.md")
		code, body := postHook(path, other, signedGitHub(other, "d-1"))
		Expect(code).To(Equal(http.StatusAccepted), body)
		Eventually(func() *infrav1.SkippedPush { return getRun(ns, "network").Status.LastSkippedPush }, timeout, interval).ShouldNot(BeNil())
		run := getRun(ns, "network")
		Expect(run.Status.LastSkippedPush.Commit).To(Equal(commitB))
		Expect(run.Status.LastSkippedPush.Reason).To(Equal(infrav1.ReasonNoPathMatched))
		Expect(run.Status.LastSkippedPush.Message).To(ContainSubstring("no path matched: the push changed stacks/dns/main.tf, stacks/network/README.md"))
		Expect(run.Status.LastHandledPush).To(Equal(commitB))
		Consistently(runID(ns, "network"), 2*time.Second, interval).Should(Equal(first))
		var rcv infrav1.TerraformRunReceiver
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "forge"}, &rcv)).To(Succeed())
		Expect(rcv.Status.Pushes[len(rcv.Status.Pushes)-1].Message).To(ContainSubstring("1 of them without a plan"))

		By("the next push, from the skipped commit, changed a module: a plan at once")
		matched := githubPush(commitB, commitC, "modules/vpc/main.tf")
		code, body = postHook(path, matched, signedGitHub(matched, "d-2"))
		Expect(code).To(Equal(http.StatusAccepted), body)
		g.nextRun(ns, "network", first)
		run = getRun(ns, "network")
		Expect(run.Status.Run.Trigger).To(Equal(infrav1.TriggerSourceChange))
		Expect(run.Status.Run.TriggerDetail).To(ContainSubstring(commitC[:12]))
		Expect(run.Status.LastHandledPush).To(Equal(commitC))
		Expect(run.Annotations).NotTo(HaveKey(infrav1.SourcePushSkippedAnnotation))
	})
})

var _ = Describe("previews of a deleted run", func() {
	It("hold their finalizer until the manager told the forge, and let go within a bounded time when the forge is unreachable", func() {
		ctx := context.Background()
		ns := newNamespace()
		w := given{engineCases[0]}.run("net", ns).Git(pushRepo, "main", "", "")
		w.Spec.Approval = infrav1.ApprovalSpec{Mode: infrav1.ApprovalAuto}
		Expect(k8sClient.Create(ctx, w.Obj())).To(Succeed())
		Expect(k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: ns}, StringData: map[string]string{"token": pushToken}})).To(Succeed())
		Expect(k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: ns}, StringData: map[string]string{"token": "forge-api-token"}})).To(Succeed())
		// The forge's address does not resolve: every try fails.
		Expect(k8sClient.Create(ctx, &infrav1.TerraformRunReceiver{ObjectMeta: metav1.ObjectMeta{Name: "forge", Namespace: ns},
			Spec: infrav1.TerraformRunReceiverSpec{Type: infrav1.ReceiverGitea, Events: []infrav1.ReceiverEvent{infrav1.ReceiverPush, infrav1.ReceiverPullRequest},
				SecretRef: infrav1.LocalObjectReference{Name: "hook"}, Previews: &infrav1.ReceiverPreviews{APIURL: "https://git.invalid", TokenSecretRef: &infrav1.LocalObjectReference{Name: "api"}}}})).To(Succeed())
		var path string
		Eventually(func() string {
			var r infrav1.TerraformRunReceiver
			Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "forge"}, &r)).To(Succeed())
			path = r.Status.WebhookPath
			return path
		}, timeout, interval).ShouldNot(BeEmpty())
		awaitServed(path)
		opened := giteaPR("opened", 4, commitA, "main")
		code, body := postHook(path, opened, map[string]string{"X-Gitea-Event": "pull_request", "X-Gitea-Signature": receiver.Sign(opened, []byte(pushToken))})
		Expect(code).To(Equal(http.StatusAccepted), body)
		Expect(getRun(ns, "net-pr4").Finalizers).To(ContainElement(infrav1.PreviewFinalizer))

		By("the tracked run deleted, then its preview (as the garbage collector does, which envtest lacks)")
		Expect(k8sClient.Delete(ctx, getRun(ns, "net"))).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "net"}, &infrav1.TerraformRun{}))
		}, timeout, interval).Should(BeTrue())
		Expect(k8sClient.Delete(ctx, getRun(ns, "net-pr4"))).To(Succeed())
		start := time.Now()
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "net-pr4"}, &infrav1.TerraformRun{}))
		}, time.Minute, interval).Should(BeTrue())
		GinkgoWriter.Printf("the preview went %s after its deletion, the forge unreachable\n", time.Since(start).Round(time.Second))
	})
})
