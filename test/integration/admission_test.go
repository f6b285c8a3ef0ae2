package integration

import (
	"context"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/testutil"
	"github.com/opr8r/opr8r/test/envtestutil"
)

var _ = Describe("admission", func() {
	ctx := context.Background()

	DescribeTable("rejects a malformed TerraformRun with a message naming the field",
		func(mutate func(*infrav1.TerraformRun), wantInMessage string) {
			run := testutil.MakeRun("bad", "default").Obj()
			run.UID = ""
			mutate(run)
			err := k8sClient.Create(ctx, run, client.DryRunAll)
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(wantInMessage))
		},
		Entry("no source", func(r *infrav1.TerraformRun) { r.Spec.Source = infrav1.Source{} }, "spec.source must set exactly one of git, inline or configMapRef"),
		Entry("two sources", func(r *infrav1.TerraformRun) {
			r.Spec.Source.Git = &infrav1.GitSource{URL: "https://example.com/x.git"}
		}, "spec.source must set exactly one"),
		Entry("a git URL with a token in it", func(r *infrav1.TerraformRun) {
			r.Spec.Source = infrav1.Source{Git: &infrav1.GitSource{URL: "https://user:ghp_secret@github.com/x.git"}}
		}, "spec.source.git.url must not embed credentials"),
		Entry("a git URL that is not a URL", func(r *infrav1.TerraformRun) {
			r.Spec.Source = infrav1.Source{Git: &infrav1.GitSource{URL: "not a url"}}
		}, "spec.source.git.url must be"),
		Entry("a git path escaping the repository", func(r *infrav1.TerraformRun) {
			r.Spec.Source = infrav1.Source{Git: &infrav1.GitSource{URL: "https://example.com/x.git", Path: "../etc"}}
		}, "spec.source.git.path must be relative"),
		Entry("an invalid variable name", func(r *infrav1.TerraformRun) {
			r.Spec.Terraform.Vars = []infrav1.Variable{{Name: "1bad", Value: testutil.MakeRun("x", "y").Var("a", "1").Spec.Terraform.Vars[0].Value}}
		}, "spec.terraform.vars[0].name"),
		Entry("a zero approval timeout", func(r *infrav1.TerraformRun) {
			r.Spec.Approval.Timeout = &metav1.Duration{}
		}, "spec.approval.timeout must be positive"),
		Entry("a negative approval timeout", func(r *infrav1.TerraformRun) {
			r.Spec.Approval.Timeout = &metav1.Duration{Duration: -time.Hour}
		}, "spec.approval.timeout must be positive"),
		Entry("an unknown engine", func(r *infrav1.TerraformRun) { r.Spec.Engine = "jenkins" }, "spec.engine"),
		Entry("a deletionPolicy typo", func(r *infrav1.TerraformRun) { r.Spec.DeletionPolicy = "Destory" }, "spec.deletionPolicy"),
		Entry("an outputs Secret name that is not a DNS name", func(r *infrav1.TerraformRun) { r.Spec.Outputs.SecretName = "Bad_Name" }, "spec.outputs.secretName"),
		Entry("a rename to an invalid Secret key", func(r *infrav1.TerraformRun) {
			r.Spec.Outputs.Rename = map[string]infrav1.SecretDataKey{"id": "no spaces"}
		}, "spec.outputs.rename"),
		Entry("an approval that is not a digest", func(r *infrav1.TerraformRun) { r.Spec.Approval.ApprovedPlan = "yes" }, "spec.approval.approvedPlan"),
		Entry("a name too long for engine objects", func(r *infrav1.TerraformRun) {
			r.Name = "a-very-long-terraform-run-name-that-exceeds-forty-characters"
		}, "metadata.name must be at most 40 characters"),
		Entry("a huge inline file", func(r *infrav1.TerraformRun) {
			r.Spec.Source.Inline.Files["big.tf"] = infrav1.FileContent(make([]byte, 300*1024))
		}, "spec.source.inline.files"),
	)

	It("accepts every example", func() {
		paths, err := filepath.Glob(filepath.Join(envtestutil.RepoRoot(), "examples", "*.yaml"))
		Expect(err).NotTo(HaveOccurred())
		Expect(paths).NotTo(BeEmpty())
		for _, p := range paths {
			b, err := os.ReadFile(p)
			Expect(err).NotTo(HaveOccurred())
			run := &infrav1.TerraformRun{}
			Expect(yaml.UnmarshalStrict(b, run)).To(Succeed(), p)
			Expect(k8sClient.Create(ctx, run, client.DryRunAll)).To(Succeed(), p)
		}
	})
})
