package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/testutil"
	"github.com/opr8r/opr8r/test/envtestutil"
)

var _ = Describe("admission", func() {
	ctx := context.Background()

	It("lets the installer restrict runner service accounts and images per namespace", func() {
		restricted, other := newNamespace(), newNamespace()
		if err := k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "opr8r-system"}}); err != nil && !apierrors.IsAlreadyExists(err) {
			Expect(err).NotTo(HaveOccurred())
		}
		mk := func(ns, name, sa, image string) *infrav1.TerraformRun {
			r := testutil.MakeRun(name, ns).Obj()
			r.UID = ""
			r.Spec.Suspend = true
			r.Spec.Runner.ServiceAccountName = sa
			r.Spec.Terraform.Image = image
			return r
		}
		By("a run stored before the restriction")
		Expect(k8sClient.Create(ctx, mk(restricted, "before", "", "evil/miner:latest"))).To(Succeed())

		policy := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "runner-policy-" + restricted, Namespace: "opr8r-system", Labels: map[string]string{"opr8r.io/runner-policy": "true"}},
			Data: map[string]string{
				"namespaces":             "unrelated, " + restricted,
				"allowedServiceAccounts": "runner-a, runner-b",
				"allowedImages":          "registry\\.example\\.com/terraform:1\\.11\\.[0-9]+\n  hashicorp/terraform:1\\.11\\.4\n",
			},
		}
		Expect(k8sClient.Create(ctx, policy)).To(Succeed())
		DeferCleanup(func() { Expect(k8sClient.Delete(ctx, policy)).To(Succeed()) })

		By("a service account not allowed is refused, naming the field and the rule")
		Eventually(func() string {
			err := k8sClient.Create(ctx, mk(restricted, "sa", "cluster-admin-sa", ""), client.DryRunAll)
			if err == nil {
				return ""
			}
			return err.Error()
		}, timeout, interval).Should(ContainSubstring("spec.runner.serviceAccountName: cluster-admin-sa is not allowed in namespace " + restricted +
			" by ConfigMap opr8r-system/runner-policy-" + restricted + " (allowedServiceAccounts: runner-a, runner-b)"))
		err := k8sClient.Create(ctx, mk(restricted, "img", "", "evil/miner:latest"), client.DryRunAll)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("spec.terraform.image: evil/miner:latest is not allowed in namespace " + restricted))
		Expect(err.Error()).To(ContainSubstring(`allowedImages: registry\.example\.com/terraform:1\.11\.[0-9]+, hashicorp/terraform:1\.11\.4`))
		By("a pattern matches the whole image, not a part of it")
		Expect(k8sClient.Create(ctx, mk(restricted, "img", "", "evil.io/registry.example.com/terraform:1.11.3"), client.DryRunAll)).NotTo(Succeed())

		By("allowed choices, and unset ones (the installer's defaults), pass")
		Expect(k8sClient.Create(ctx, mk(restricted, "ok", "runner-b", "registry.example.com/terraform:1.11.3"), client.DryRunAll)).To(Succeed())
		Expect(k8sClient.Create(ctx, mk(restricted, "ok", "", "hashicorp/terraform:1.11.4"), client.DryRunAll)).To(Succeed())
		Expect(k8sClient.Create(ctx, mk(restricted, "ok", "", ""), client.DryRunAll)).To(Succeed())

		By("the same policy restricts check images, tolerations, node selectors and resource ceilings, naming each field")
		policy.Data["allowedTolerations"] = "dedicated"
		policy.Data["allowedNodeSelectors"] = "pool=terraform\nzone=*"
		policy.Data["maxCPU"], policy.Data["maxMemory"], policy.Data["maxWorkspaceSize"] = "2", "4Gi", "20Gi"
		Expect(k8sClient.Update(ctx, policy)).To(Succeed())
		refused := func(want string, change func(*infrav1.TerraformRun)) {
			GinkgoHelper()
			Eventually(func() string {
				r := mk(restricted, "pol", "", "")
				change(r)
				err := k8sClient.Create(ctx, r, client.DryRunAll)
				if err == nil {
					return ""
				}
				return err.Error()
			}, timeout, interval).Should(ContainSubstring(want))
		}
		refused("spec.checks[].image: evil/scanner:1 is not allowed", func(r *infrav1.TerraformRun) {
			r.Spec.Checks = []infrav1.Check{{Name: "scan", Image: "evil/scanner:1", Command: []string{"scan"}}}
		})
		refused("spec.runner.tolerations: node-role.kubernetes.io/control-plane may not be tolerated", func(r *infrav1.TerraformRun) {
			r.Spec.Runner.Tolerations = []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists}}
		})
		refused("spec.runner.tolerations: <every taint> may not be tolerated", func(r *infrav1.TerraformRun) {
			r.Spec.Runner.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		})
		refused("spec.runner.nodeSelector: kubernetes.io/hostname=master is not allowed", func(r *infrav1.TerraformRun) {
			r.Spec.Runner.NodeSelector = map[string]string{"kubernetes.io/hostname": "master"}
		})
		refused("spec.runner.resources: cpu above 2 per step container", func(r *infrav1.TerraformRun) {
			r.Spec.Runner.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}}
		})
		refused("spec.runner.resources: memory above 4Gi", func(r *infrav1.TerraformRun) {
			r.Spec.Runner.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Ti")}}
		})
		refused("spec.runner.workspace.size: 1Ti is above 20Gi", func(r *infrav1.TerraformRun) {
			r.Spec.Runner.Workspace.Size = ptr.To(resource.MustParse("1Ti"))
		})
		policy.Data["allowedTokenAudiences"] = "sts.amazonaws.com"
		Expect(k8sClient.Update(ctx, policy)).To(Succeed())
		refused("spec.runner.identityToken.audience: https://kubernetes.default.svc is not allowed", func(r *infrav1.TerraformRun) {
			r.Spec.Runner.IdentityToken = &infrav1.IdentityToken{Audience: "https://kubernetes.default.svc"}
		})
		within := mk(restricted, "pol", "", "hashicorp/terraform:1.11.4")
		within.Spec.Checks = []infrav1.Check{{Name: "scan", Image: "registry.example.com/terraform:1.11.2", Command: []string{"scan"}}}
		within.Spec.Runner.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "tf", Effect: corev1.TaintEffectNoSchedule}}
		within.Spec.Runner.NodeSelector = map[string]string{"pool": "terraform", "zone": "b"}
		within.Spec.Runner.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}, Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")}}
		within.Spec.Runner.Workspace.Size = ptr.To(resource.MustParse("10Gi"))
		within.Spec.Runner.IdentityToken = &infrav1.IdentityToken{Audience: "sts.amazonaws.com", EnvName: "AWS_WEB_IDENTITY_TOKEN_FILE"}
		Expect(k8sClient.Create(ctx, within, client.DryRunAll)).To(Succeed(), "choices within the policy pass")

		By("a namespace the policy does not name is free")
		Expect(k8sClient.Create(ctx, mk(other, "free", "anything", "evil/miner:latest"), client.DryRunAll)).To(Succeed())

		By("a run stored before can still be changed and deleted, but not given another refused image")
		patchRun(restricted, "before", func(r *infrav1.TerraformRun) { r.Spec.History.KeepRecords = ptr.To[int32](3) })
		got := getRun(restricted, "before")
		p := client.MergeFrom(got.DeepCopy())
		got.Spec.Terraform.Image = "evil/miner:v2"
		Expect(k8sClient.Patch(ctx, got, p)).NotTo(Succeed())
		Expect(k8sClient.Delete(ctx, getRun(restricted, "before"))).To(Succeed())
	})

	It("rejects every malformed TerraformRun at admission with a message naming the field", func() {
		accepted := 0
		for _, tc := range malformed() {
			run := testutil.MakeRun("bad", "default").Obj()
			run.UID = ""
			tc.mutate(run)
			err := k8sClient.Create(ctx, run, client.DryRunAll)
			if err == nil {
				accepted++
				AddReportEntry("accepted: " + tc.name)
				continue
			}
			Expect(err.Error()).To(ContainSubstring(tc.want), "case %q", tc.name)
		}
		Expect(len(malformed())).To(BeNumerically(">=", 40))
		Expect(accepted).To(Equal(0))
		checkReliabilityRow("malformed TerraformRuns applied", fmt.Sprint(len(malformed())))
		checkReliabilityRow("malformed TerraformRuns accepted", fmt.Sprint(accepted))
	})

	It("refuses an engine change while a run is active, and allows it after", func() {
		ns := newNamespace()
		run := testutil.MakeRun("switch", ns).Obj()
		run.UID = ""
		from, to := engineCases[0], engineCases[1]
		run.Spec.Engine = from.name
		run.Spec.Suspend = true // the manager starts nothing; the active run is set up below
		Expect(k8sClient.Create(ctx, run)).To(Succeed())
		Eventually(func() []string { return getRun(ns, "switch").Finalizers }, timeout, interval).ShouldNot(BeEmpty())
		// A pending child the manager can observe, so it too sees the run as active.
		owner := getRun(ns, "switch")
		child, err := from.kit.Engine.Build(buildRequest(from, owner, infrav1.RunApply, 1))
		Expect(err).NotTo(HaveOccurred())
		Expect(k8sClient.Create(ctx, child)).To(Succeed())
		gvk := from.kit.Engine.ChildGVK()
		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			r := getRun(ns, "switch")
			r.Status.Run = &infrav1.RunStatus{ID: child.GetName(), Type: "apply", Engine: from.name, SpecHash: "x", Attempt: 1, Phase: infrav1.RunRunning,
				Child: infrav1.ChildReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: child.GetName()}}
			return k8sClient.Status().Update(ctx, r)
		})).To(Succeed())

		r := getRun(ns, "switch")
		patch := client.MergeFrom(r.DeepCopy())
		r.Spec.Engine = to.name
		err = k8sClient.Patch(ctx, r, patch)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("spec.engine cannot change while a run is active"))
		Expect(getRun(ns, "switch").Spec.Engine).To(Equal(from.name), "nothing stored is lost")

		By("once the run has ended (its child deleted), the engine may change")
		Expect(k8sClient.Delete(ctx, child)).To(Succeed())
		Eventually(phase(ns, "switch"), timeout, interval).Should(Equal(infrav1.RunFailed))
		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			r := getRun(ns, "switch")
			patch := client.MergeFrom(r.DeepCopy())
			r.Spec.Engine = to.name
			return k8sClient.Patch(ctx, r, patch)
		})).To(Succeed())
	})

	It("stops a check of the old engine before a run of the new one starts, once spec.engine changed", func() {
		ns := newNamespace()
		from, to := given{engineCases[0]}, given{engineCases[1]}
		from.appliedWithChecks(ns, "moved", func(r *infrav1.TerraformRun) { r.Spec.Terraform.Vars = nil })
		c := from.checkChild(ns, "moved", map[string]bool{})
		c.Start()
		// Admission lets the engine change: no run is active, only a check.
		patchRun(ns, "moved", func(r *infrav1.TerraformRun) { r.Spec.Engine = to.e.name })
		Eventually(c.CancelRequested, timeout, interval).Should(BeTrue(), "the old engine's check is stopped")
		Consistently(func() int { return applyRuns(to, ns) }, 2*time.Second, interval).Should(BeZero(), "no run of the new engine starts beside the check")
		c.CompleteAfterGate()
		s := to.nextRun(ns, "moved", "moved-1")
		Expect(s.Key().Name).NotTo(Equal(c.Key().Name))
		Expect(lastCheck(ns, "moved", c.Key().Name).Message).To(HavePrefix(infrav1.CheckSuperseded))
		Expect(getRun(ns, "moved").Status.Run.Engine).To(Equal(to.e.name))
	})

	It("stalls a run whose inputs are too large for their one ConfigMap, naming the limit", func() {
		ns := newNamespace()
		run := testutil.MakeRun("toolarge", ns).Obj()
		run.UID = ""
		// Each file and the vars fit the schema; together they pass 1 MiB.
		for i := 0; i < 3; i++ {
			run.Spec.Source.Inline.Files[fmt.Sprintf("f%d.tf", i)] = infrav1.FileContent("#" + strings.Repeat("x", 250<<10))
		}
		run.Spec.Terraform.Vars = []infrav1.Variable{{Name: "big", Value: apiextensionsv1.JSON{Raw: []byte(`"` + strings.Repeat("y", 300<<10) + `"`)}}}
		Expect(k8sClient.Create(ctx, run)).To(Succeed())
		Eventually(condReason(ns, "toolarge", infrav1.StalledCondition), timeout, interval).Should(Equal("True/InvalidSpec"))
		Expect(cond(getRun(ns, "toolarge"), infrav1.StalledCondition).Message).To(ContainSubstring("under 1 MiB together"))
	})

	It("refuses map keys the schema cannot check at admission, and never refuses a write that leaves them as stored", func() {
		ns := newNamespace()
		run := testutil.MakeRun("badkeys", ns).Obj()
		run.UID = ""
		run.Spec.Source.Inline.Files["../escape.tf"] = "x"
		err := k8sClient.Create(ctx, run)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring(`spec.source.inline.files: "../escape.tf" is not a plain file name`))
		Expect(apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(run), &infrav1.TerraformRun{}))).To(BeTrue())

		By("a run with good keys takes a bad one only by a refused write; other writes pass")
		run = testutil.MakeRun("goodkeys", ns).Obj()
		run.UID = ""
		run.Spec.Suspend = true
		// The one dot file a module brings: its lock file.
		run.Spec.Source.Inline.Files[".terraform.lock.hcl"] = "# the module's lock file\n"
		Expect(k8sClient.Create(ctx, run)).To(Succeed())
		patchRun(ns, "goodkeys", func(r *infrav1.TerraformRun) { r.Spec.History.KeepRecords = ptr.To[int32](4) })
		got := getRun(ns, "goodkeys")
		p := client.MergeFrom(got.DeepCopy())
		got.Spec.Outputs.Rename = map[string]infrav1.SecretDataKey{"a": "k", "b": "k", "c": "other"}
		err = k8sClient.Patch(ctx, got, p)
		Expect(err).To(HaveOccurred())
		// The keys come in the map's order.
		Expect(err.Error()).To(And(ContainSubstring(`spec.outputs.rename: "`), ContainSubstring(`"a" -> "k"`), ContainSubstring(`"b" -> "k"`),
			ContainSubstring(`: two outputs renamed to the same Secret key`), Not(ContainSubstring(`"c"`))))
	})

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

type malformedCase struct {
	name   string
	mutate func(*infrav1.TerraformRun)
	want   string
}

func jsonVal(s string) apiextensionsv1.JSON { return apiextensionsv1.JSON{Raw: []byte(s)} }

// malformed are TerraformRuns the API must refuse, each with the text the
// refusal must contain: the offending field and what to do.
func malformed() []malformedCase {
	git := func(url, ref, path string) func(*infrav1.TerraformRun) {
		return func(r *infrav1.TerraformRun) {
			r.Spec.Source = infrav1.Source{Git: &infrav1.GitSource{URL: url, Ref: ref, Path: path}}
		}
	}
	oci := func(o infrav1.OCISource) func(*infrav1.TerraformRun) {
		return func(r *infrav1.TerraformRun) { r.Spec.Source = infrav1.Source{OCI: &o} }
	}
	digest := "sha256:" + strings.Repeat("a", 64)
	many := map[string]infrav1.FileContent{}
	for i := 0; i < 65; i++ {
		many[fmt.Sprintf("f%d.tf", i)] = "x"
	}
	return []malformedCase{
		{"no source", func(r *infrav1.TerraformRun) { r.Spec.Source = infrav1.Source{} }, "spec.source must set exactly one of git, oci, inline or configMapRef"},
		{"git and oci sources", func(r *infrav1.TerraformRun) {
			r.Spec.Source = infrav1.Source{Git: &infrav1.GitSource{URL: "https://example.com/x.git"}, OCI: &infrav1.OCISource{URL: "oci://ghcr.io/acme/net"}}
		}, "spec.source must set exactly one of git, oci, inline or configMapRef"},
		{"OCI URL without oci://", oci(infrav1.OCISource{URL: "https://ghcr.io/acme/net"}), "spec.source.oci.url must be oci://<registry>/<repository>"},
		{"OCI URL with a tag", oci(infrav1.OCISource{URL: "oci://ghcr.io/acme/net:v1"}), "put the tag in spec.source.oci.tag"},
		{"OCI URL with credentials", oci(infrav1.OCISource{URL: "oci://robot:s3cret@ghcr.io/acme/net"}), "no tag, digest or credentials"},
		{"OCI URL with an uppercase repository", oci(infrav1.OCISource{URL: "oci://ghcr.io/Acme/Net"}), "lowercase repository path"},
		{"OCI tag and digest", oci(infrav1.OCISource{URL: "oci://ghcr.io/acme/net", Tag: "v1", Digest: digest}), "spec.source.oci: set tag or digest, not both"},
		{"OCI digest that is not sha256", oci(infrav1.OCISource{URL: "oci://ghcr.io/acme/net", Digest: "md5:abc"}), "spec.source.oci.digest"},
		{"OCI tag with a slash", oci(infrav1.OCISource{URL: "oci://ghcr.io/acme/net", Tag: "v1/x"}), "spec.source.oci.tag"},
		{"OCI path escaping the artifact", oci(infrav1.OCISource{URL: "oci://ghcr.io/acme/net", Path: "a/../../etc"}), "spec.source.oci.path must be relative"},
		{"two sources", func(r *infrav1.TerraformRun) {
			r.Spec.Source.Git = &infrav1.GitSource{URL: "https://example.com/x.git"}
		}, "spec.source must set exactly one"},
		{"three sources", func(r *infrav1.TerraformRun) {
			r.Spec.Source.Git = &infrav1.GitSource{URL: "https://example.com/x.git"}
			r.Spec.Source.ConfigMapRef = &infrav1.LocalObjectReference{Name: "m"}
		}, "spec.source must set exactly one"},
		{"git URL with a token", git("https://user:ghp_secret@github.com/x.git", "main", ""), "spec.source.git.url must not embed credentials"},
		{"http URL with a token", git("http://tok@git.example.com/x.git", "main", ""), "spec.source.git.url must not embed credentials"},
		{"git URL that is not a URL", git("not a url", "main", ""), "spec.source.git.url must be"},
		{"git URL with a bad scheme", git("ftp://example.com/x.git", "main", ""), "spec.source.git.url must be"},
		{"empty git URL", git("", "main", ""), "spec.source.git.url"},
		{"git ref with ..", git("https://example.com/x.git", "a..b", ""), "spec.source.git.ref must be a branch, tag or commit SHA"},
		{"git ref like a flag", git("https://example.com/x.git", "-upload-pack=x", ""), "spec.source.git.ref must be a branch, tag or commit SHA"},
		{"git path escaping the repository", git("https://example.com/x.git", "main", "a/../../etc"), "spec.source.git.path must be relative"},
		{"absolute git path", git("https://example.com/x.git", "main", "/etc"), "spec.source.git.path must be relative"},
		{"no inline files", func(r *infrav1.TerraformRun) { r.Spec.Source.Inline.Files = map[string]infrav1.FileContent{} }, "spec.source.inline.files"},
		{"too many inline files", func(r *infrav1.TerraformRun) { r.Spec.Source.Inline.Files = many }, "spec.source.inline.files"},
		{"a huge inline file", func(r *infrav1.TerraformRun) {
			r.Spec.Source.Inline.Files["big.tf"] = infrav1.FileContent(make([]byte, 300*1024))
		}, "spec.source.inline.files"},
		{"configMapRef that is not a name", func(r *infrav1.TerraformRun) {
			r.Spec.Source = infrav1.Source{ConfigMapRef: &infrav1.LocalObjectReference{Name: "Bad_Name"}}
		}, "spec.source.configMapRef.name"},
		{"bad workspace", func(r *infrav1.TerraformRun) { r.Spec.Terraform.Workspace = "bad ws" }, "spec.terraform.workspace"},
		{"invalid variable name", func(r *infrav1.TerraformRun) {
			r.Spec.Terraform.Vars = []infrav1.Variable{{Name: "1bad", Value: jsonVal("1")}}
		}, "spec.terraform.vars[0].name"},
		{"variable name with a dot", func(r *infrav1.TerraformRun) {
			r.Spec.Terraform.Vars = []infrav1.Variable{{Name: "a.b", Value: jsonVal("1")}}
		}, "spec.terraform.vars[0].name"},
		{"duplicate variable", func(r *infrav1.TerraformRun) {
			r.Spec.Terraform.Vars = []infrav1.Variable{{Name: "a", Value: jsonVal("1")}, {Name: "a", Value: jsonVal("2")}}
		}, "spec.terraform.vars[1]: Duplicate value"},
		{"varsFrom of an unknown kind", func(r *infrav1.TerraformRun) {
			r.Spec.Terraform.VarsFrom = []infrav1.VarsFromSource{{Kind: "Deployment", Name: "x"}}
		}, "spec.terraform.varsFrom[0].kind"},
		{"env var reserved by the runner", func(r *infrav1.TerraformRun) {
			r.Spec.Terraform.Env = []infrav1.SecretEnvVar{{Name: "PATH", SecretKeyRef: infrav1.SecretKeyRef{Name: "s", Key: "k"}}}
		}, "spec.terraform.env name PATH is reserved"},
		{"env var that preloads a library", func(r *infrav1.TerraformRun) {
			r.Spec.Terraform.Env = []infrav1.SecretEnvVar{{Name: "LD_PRELOAD", SecretKeyRef: infrav1.SecretKeyRef{Name: "s", Key: "k"}}}
		}, "spec.terraform.env name LD_PRELOAD is reserved"},
		{"env var that points terraform at another CLI config (dev_overrides: another provider binary at apply)", func(r *infrav1.TerraformRun) {
			r.Spec.Terraform.Env = []infrav1.SecretEnvVar{{Name: "TF_CLI_CONFIG_FILE", SecretKeyRef: infrav1.SecretKeyRef{Name: "s", Key: "k"}}}
		}, "spec.terraform.env name TF_CLI_CONFIG_FILE is reserved"},
		{"env var that points terraform at a provider mirror other than the install's", func(r *infrav1.TerraformRun) {
			r.Spec.Terraform.Env = []infrav1.SecretEnvVar{{Name: "OPR8R_PROVIDER_MIRROR", SecretKeyRef: infrav1.SecretKeyRef{Name: "s", Key: "k"}}}
		}, "spec.terraform.env name OPR8R_PROVIDER_MIRROR is reserved"},
		{"env var that trusts a CA of the run's own", func(r *infrav1.TerraformRun) {
			r.Spec.Terraform.Env = []infrav1.SecretEnvVar{{Name: "SSL_CERT_DIR", SecretKeyRef: infrav1.SecretKeyRef{Name: "s", Key: "k"}}}
		}, "spec.terraform.env name SSL_CERT_DIR is reserved"},
		{"env var that lets the shared provider cache skip the lock file's checksums", func(r *infrav1.TerraformRun) {
			r.Spec.Terraform.Env = []infrav1.SecretEnvVar{{Name: "TF_PLUGIN_CACHE_MAY_BREAK_DEPENDENCY_LOCK_FILE", SecretKeyRef: infrav1.SecretKeyRef{Name: "s", Key: "k"}}}
		}, "spec.terraform.env name TF_PLUGIN_CACHE_MAY_BREAK_DEPENDENCY_LOCK_FILE is reserved"},
		{"env var that reattaches providers", func(r *infrav1.TerraformRun) {
			r.Spec.Terraform.Env = []infrav1.SecretEnvVar{{Name: "TF_REATTACH_PROVIDERS", SecretKeyRef: infrav1.SecretKeyRef{Name: "s", Key: "k"}}}
		}, "spec.terraform.env name TF_REATTACH_PROVIDERS is reserved"},
		{"env var that turns on terraform's trace log (credentials in the log)", func(r *infrav1.TerraformRun) {
			r.Spec.Terraform.Env = []infrav1.SecretEnvVar{{Name: "TF_LOG", SecretKeyRef: infrav1.SecretKeyRef{Name: "s", Key: "k"}}}
		}, "spec.terraform.env name TF_LOG is reserved"},
		{"files envName PATH", func(r *infrav1.TerraformRun) {
			r.Spec.Terraform.Files = []infrav1.SecretFile{{SecretName: "s", MountPath: "/secrets/x", EnvName: "PATH"}}
		}, "spec.terraform.files envName PATH is reserved"},
		{"files mountPath over the service-account token", func(r *infrav1.TerraformRun) {
			r.Spec.Terraform.Files = []infrav1.SecretFile{{SecretName: "s", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}}
		}, "would hide or replace a system or runner directory"},
		{"files mountPath over the loader's libraries", func(r *infrav1.TerraformRun) {
			r.Spec.Terraform.Files = []infrav1.SecretFile{{SecretName: "s", MountPath: "/lib64"}}
		}, "would hide or replace a system or runner directory"},
		{"identity token without an audience", func(r *infrav1.TerraformRun) {
			r.Spec.Runner.IdentityToken = &infrav1.IdentityToken{}
		}, "spec.runner.identityToken.audience"},
		{"identity token living a minute", func(r *infrav1.TerraformRun) {
			r.Spec.Runner.IdentityToken = &infrav1.IdentityToken{Audience: "sts.amazonaws.com", ExpirationSeconds: ptr.To[int64](60)}
		}, "spec.runner.identityToken.expirationSeconds"},
		{"identity token exported as LD_PRELOAD", func(r *infrav1.TerraformRun) {
			r.Spec.Runner.IdentityToken = &infrav1.IdentityToken{Audience: "sts.amazonaws.com", EnvName: "LD_PRELOAD"}
		}, "spec.runner.identityToken.envName LD_PRELOAD is reserved"},
		{"runner group 0", func(r *infrav1.TerraformRun) {
			r.Spec.Runner.SecurityContext = &infrav1.RunnerSecurityContext{RunAsGroup: ptr.To[int64](0)}
		}, "spec.runner.securityContext.runAsGroup"},
		{"runner fsGroup 0", func(r *infrav1.TerraformRun) {
			r.Spec.Runner.SecurityContext = &infrav1.RunnerSecurityContext{FSGroup: ptr.To[int64](0)}
		}, "spec.runner.securityContext.fsGroup"},
		{"env var with a bad name", func(r *infrav1.TerraformRun) {
			r.Spec.Terraform.Env = []infrav1.SecretEnvVar{{Name: "1X", SecretKeyRef: infrav1.SecretKeyRef{Name: "s", Key: "k"}}}
		}, "spec.terraform.env[0].name"},
		{"env Secret key with a slash", func(r *infrav1.TerraformRun) {
			r.Spec.Terraform.Env = []infrav1.SecretEnvVar{{Name: "X", SecretKeyRef: infrav1.SecretKeyRef{Name: "s", Key: "a/b"}}}
		}, "spec.terraform.env[0].secretKeyRef.key"},
		{"relative files mountPath", func(r *infrav1.TerraformRun) {
			r.Spec.Terraform.Files = []infrav1.SecretFile{{SecretName: "s", MountPath: "creds"}}
		}, "mountPath must be an absolute path"},
		{"files mountPath hiding /etc", func(r *infrav1.TerraformRun) {
			r.Spec.Terraform.Files = []infrav1.SecretFile{{SecretName: "s", MountPath: "/etc/x"}}
		}, "would hide or replace a system or runner directory"},
		{"files mountPath hiding the workspace", func(r *infrav1.TerraformRun) {
			r.Spec.Terraform.Files = []infrav1.SecretFile{{SecretName: "s", MountPath: "/workspace"}}
		}, "would hide or replace a system or runner directory"},
		{"image name too long", func(r *infrav1.TerraformRun) { r.Spec.Terraform.Image = strings.Repeat("a", 600) }, "spec.terraform.image"},
		{"two backends", func(r *infrav1.TerraformRun) {
			r.Spec.Backend = &infrav1.BackendSpec{Kubernetes: &infrav1.KubernetesBackend{}, ConfigSecretRef: &infrav1.BackendConfigRef{Type: "s3", Name: "b"}}
		}, "spec.backend must set at most one of kubernetes or configSecretRef"},
		{"bad backend type", func(r *infrav1.TerraformRun) {
			r.Spec.Backend = &infrav1.BackendSpec{ConfigSecretRef: &infrav1.BackendConfigRef{Type: "S3!", Name: "b"}}
		}, "spec.backend.configSecretRef.type"},
		{"bad state secret suffix", func(r *infrav1.TerraformRun) {
			r.Spec.Backend = &infrav1.BackendSpec{Kubernetes: &infrav1.KubernetesBackend{SecretSuffix: "Bad"}}
		}, "spec.backend.kubernetes.secretSuffix"},
		{"unknown engine", func(r *infrav1.TerraformRun) { r.Spec.Engine = "jenkins" }, "spec.engine"},
		{"unknown approval mode", func(r *infrav1.TerraformRun) { r.Spec.Approval.Mode = "Sometimes" }, "spec.approval.mode"},
		{"zero approval timeout", func(r *infrav1.TerraformRun) { r.Spec.Approval.Timeout = &metav1.Duration{} }, "spec.approval.timeout must be positive"},
		{"negative approval timeout", func(r *infrav1.TerraformRun) { r.Spec.Approval.Timeout = &metav1.Duration{Duration: -time.Hour} }, "spec.approval.timeout must be positive"},
		{"absurd approval timeout", func(r *infrav1.TerraformRun) {
			r.Spec.Approval.Timeout = &metav1.Duration{Duration: 100000 * time.Hour}
		}, "at most 8760h"},
		{"approval that is not a digest", func(r *infrav1.TerraformRun) { r.Spec.Approval.ApprovedPlan = "yes" }, "spec.approval.approvedPlan"},
		{"approve and reject the same plan", func(r *infrav1.TerraformRun) {
			r.Spec.Approval.ApprovedPlan, r.Spec.Approval.RejectedPlan = digest, digest
		}, "name the same plan; set only one"},
		{"reject reason too long", func(r *infrav1.TerraformRun) { r.Spec.Approval.RejectReason = strings.Repeat("x", 300) }, "spec.approval.rejectReason"},
		{"outputs Secret name that is not a DNS name", func(r *infrav1.TerraformRun) { r.Spec.Outputs.SecretName = "Bad_Name" }, "spec.outputs.secretName"},
		{"output both included and excluded", func(r *infrav1.TerraformRun) {
			r.Spec.Outputs.Include, r.Spec.Outputs.Exclude = []string{"id"}, []string{"id"}
		}, "a name may not be both included and excluded"},
		{"included output that is not a name", func(r *infrav1.TerraformRun) { r.Spec.Outputs.Include = []string{"1bad"} }, "spec.outputs.include[0]"},
		{"rename to an invalid Secret key", func(r *infrav1.TerraformRun) {
			r.Spec.Outputs.Rename = map[string]infrav1.SecretDataKey{"id": "no spaces"}
		}, "spec.outputs.rename"},
		{"outputs into the state Secret", func(r *infrav1.TerraformRun) { r.Spec.Outputs.SecretName = "tfstate-default-bad" }, "spec.outputs.secretName names one of the Secrets opr8r"},
		{"outputs into a run's plan Secret", func(r *infrav1.TerraformRun) { r.Spec.Outputs.SecretName = "bad-3-plan" }, "spec.outputs.secretName names one of the Secrets opr8r"},
		{"outputs into a destroy run's raw outputs", func(r *infrav1.TerraformRun) { r.Spec.Outputs.SecretName = "other-destroy-2-tfoutputs" }, "spec.outputs.secretName names one of the Secrets opr8r"},
		{"inline file name with a directory", func(r *infrav1.TerraformRun) { r.Spec.Source.Inline.Files["mod/main.tf"] = "x" }, `spec.source.inline.files: "mod/main.tf" is not a plain file name`},
		{"hidden inline file name", func(r *infrav1.TerraformRun) { r.Spec.Source.Inline.Files[".vars.json"] = "{}" }, `spec.source.inline.files: ".vars.json" is not a plain file name`},
		{"rename key that is not an output name", func(r *infrav1.TerraformRun) {
			r.Spec.Outputs.Rename = map[string]infrav1.SecretDataKey{"1st": "first"}
		}, `spec.outputs.rename: "1st" is not a Terraform output name`},
		{"two outputs renamed to the same key", func(r *infrav1.TerraformRun) {
			r.Spec.Outputs.Rename = map[string]infrav1.SecretDataKey{"a": "same", "b": "same"}
		}, `"a" -> "same"`},
		{"two outputs renamed to the same key (the rule)", func(r *infrav1.TerraformRun) {
			r.Spec.Outputs.Rename = map[string]infrav1.SecretDataKey{"a": "same", "b": "same", "c": "other"}
		}, `": two outputs renamed to the same Secret key would overwrite each other`},
		{"no approvals required", func(r *infrav1.TerraformRun) { r.Spec.Approval.RequiredApprovals = -1 }, "spec.approval.requiredApprovals"},
		{"too many approvals required", func(r *infrav1.TerraformRun) { r.Spec.Approval.RequiredApprovals = 11 }, "spec.approval.requiredApprovals"},
		{"selfApproval typo", func(r *infrav1.TerraformRun) { r.Spec.Approval.SelfApproval = "Never" }, "spec.approval.selfApproval"},
		{"approvers that name nobody", func(r *infrav1.TerraformRun) { r.Spec.Approval.Approvers = &infrav1.Approvers{} }, "spec.approval.approvers lists no user and no group"},
		{"approvers with empty lists", func(r *infrav1.TerraformRun) {
			r.Spec.Approval.Approvers = &infrav1.Approvers{Users: []string{}, Groups: []string{}}
		}, "spec.approval.approvers lists no user and no group"},
		{"an empty approver user", func(r *infrav1.TerraformRun) { r.Spec.Approval.Approvers = &infrav1.Approvers{Users: []string{""}} }, "spec.approval.approvers.users"},
		{"an empty approver group", func(r *infrav1.TerraformRun) { r.Spec.Approval.Approvers = &infrav1.Approvers{Groups: []string{""}} }, "spec.approval.approvers.groups"},
		{"more approvals required than approvers named", func(r *infrav1.TerraformRun) {
			r.Spec.Approval.RequiredApprovals, r.Spec.Approval.Approvers = 3, &infrav1.Approvers{Users: []string{"alice"}}
		}, "spec.approval.requiredApprovals is more than the number of users spec.approval.approvers names"},
		{"a Require rule whose approvers name nobody", func(r *infrav1.TerraformRun) {
			r.Spec.Approval.Rules = []infrav1.ApprovalRule{{Name: "iam", Condition: "true", Effect: infrav1.RuleRequire,
				Require: &infrav1.RuleRequirement{Approvals: 1, Approvers: &infrav1.Approvers{}}}}
		}, "spec.approval.rules[].require.approvers lists no user and no group"},
		{"a Require rule needing more approvals than the users it names", func(r *infrav1.TerraformRun) {
			r.Spec.Approval.Rules = []infrav1.ApprovalRule{{Name: "iam", Condition: "true", Effect: infrav1.RuleRequire,
				Require: &infrav1.RuleRequirement{Approvals: 2, Approvers: &infrav1.Approvers{Users: []string{"sam"}}}}}
		}, "spec.approval.rules[].require.approvals is more than the number of users its approvers name"},
		{"a window in the manager's Local zone", func(r *infrav1.TerraformRun) {
			r.Spec.Approval.Windows = []infrav1.ChangeWindow{{Name: "w", Type: infrav1.WindowAllow, Schedule: "0 9 * * *",
				Duration: metav1.Duration{Duration: time.Hour}, TimeZone: "Local"}}
		}, "spec.approval.windows[].timeZone Local is the manager's own time zone"},
		{"planOnly with driftRemediation Apply", func(r *infrav1.TerraformRun) {
			r.Spec.PlanOnly, r.Spec.DriftRemediation = true, infrav1.DriftApply
		}, "spec.planOnly never applies, so spec.driftRemediation: Apply contradicts it"},
		{"a state secretSuffix ending in -<number>", func(r *infrav1.TerraformRun) {
			r.Spec.Backend = &infrav1.BackendSpec{Kubernetes: &infrav1.KubernetesBackend{SecretSuffix: "db-1"}}
		}, "spec.backend.kubernetes.secretSuffix db-1 ends in -<number>"},
		{"two files at one mountPath", func(r *infrav1.TerraformRun) {
			r.Spec.Terraform.Files = []infrav1.SecretFile{{SecretName: "a", MountPath: "/secrets/x"}, {SecretName: "b", MountPath: "/secrets/x"}}
		}, `spec.terraform.files[1]: Duplicate value: {"mountPath":"/secrets/x"}`},
		{"one Secret twice in varsFrom", func(r *infrav1.TerraformRun) {
			r.Spec.Terraform.VarsFrom = []infrav1.VarsFromSource{{Kind: "Secret", Name: "v"}, {Kind: "ConfigMap", Name: "v"}, {Kind: "Secret", Name: "v"}}
		}, `spec.terraform.varsFrom[2]: Duplicate value: {"kind":"Secret","name":"v"}`},
		{"rejection typo", func(r *infrav1.TerraformRun) { r.Spec.Approval.Rejection = "All" }, "spec.approval.rejection"},
		{"a spec-author stamp typed by hand", func(r *infrav1.TerraformRun) {
			r.Annotations = map[string]string{infrav1.SpecAuthorAnnotation: "someone-else"}
		}, "metadata.annotations[infra.opr8r.io/spec-author] is stamped at admission"},
		{"keepFinished 0", func(r *infrav1.TerraformRun) { r.Spec.History.KeepFinished = ptr.To[int32](0) }, "spec.history.keepFinished"},
		{"keepFinished 1000", func(r *infrav1.TerraformRun) { r.Spec.History.KeepFinished = ptr.To[int32](1000) }, "spec.history.keepFinished"},
		{"negative history TTL", func(r *infrav1.TerraformRun) {
			r.Spec.History.TTLAfterFinished = &metav1.Duration{Duration: -time.Minute}
		}, "ttlAfterFinished must not be negative"},
		{"deletionPolicy typo", func(r *infrav1.TerraformRun) { r.Spec.DeletionPolicy = "Destory" }, "spec.deletionPolicy"},
		{"privileged runner", func(r *infrav1.TerraformRun) {
			r.Spec.Runner.SecurityContext = &infrav1.RunnerSecurityContext{Privileged: ptr.To(true)}
		}, "spec.runner.securityContext.privileged must be false"},
		{"runner allowing privilege escalation", func(r *infrav1.TerraformRun) {
			r.Spec.Runner.SecurityContext = &infrav1.RunnerSecurityContext{AllowPrivilegeEscalation: ptr.To(true)}
		}, "allowPrivilegeEscalation must be false"},
		{"runner as root", func(r *infrav1.TerraformRun) {
			r.Spec.Runner.SecurityContext = &infrav1.RunnerSecurityContext{RunAsUser: ptr.To[int64](0)}
		}, "spec.runner.securityContext.runAsUser"},
		{"reserved label", func(r *infrav1.TerraformRun) { r.Labels = map[string]string{infrav1.RunNameLabel: "other"} }, "the infra.opr8r.io/ prefix is reserved for opr8r"},
		{"a dependency on itself", func(r *infrav1.TerraformRun) { r.Spec.DependsOn = []infrav1.Dependency{{Name: r.Name}} }, "spec.dependsOn names this TerraformRun itself"},
		{"a dependency listed twice", func(r *infrav1.TerraformRun) {
			r.Spec.DependsOn = []infrav1.Dependency{{Name: "net"}, {Name: "dns"}, {Name: "net", Outputs: &infrav1.DependencyOutputs{All: true}}}
		}, "spec.dependsOn names the same TerraformRun twice"},
		{"a dependency's outputs selecting nothing", func(r *infrav1.TerraformRun) {
			r.Spec.DependsOn = []infrav1.Dependency{{Name: "net", Outputs: &infrav1.DependencyOutputs{}}}
		}, "spec.dependsOn[].outputs must set exactly one of all: true or select"},
		{"a dependency's outputs both all and selected", func(r *infrav1.TerraformRun) {
			r.Spec.DependsOn = []infrav1.Dependency{{Name: "net", Outputs: &infrav1.DependencyOutputs{All: true, Select: []infrav1.OutputVariable{{Output: "vpc_id"}}}}}
		}, "spec.dependsOn[].outputs must set exactly one of all: true or select"},
		{"a dependency's output selected twice", func(r *infrav1.TerraformRun) {
			r.Spec.DependsOn = []infrav1.Dependency{{Name: "net", Outputs: &infrav1.DependencyOutputs{Select: []infrav1.OutputVariable{{Output: "vpc_id"}, {Output: "vpc_id", As: "vpc"}}}}}
		}, "spec.dependsOn[0].outputs.select[1]: Duplicate value"},
		{"a dependency that is not a name", func(r *infrav1.TerraformRun) { r.Spec.DependsOn = []infrav1.Dependency{{Name: "Net_1"}} }, "spec.dependsOn[0].name"},
		{"a dependency's namespace that is not a name", func(r *infrav1.TerraformRun) {
			r.Spec.DependsOn = []infrav1.Dependency{{Name: "net", Namespace: "Infra"}}
		}, "spec.dependsOn[0].namespace"},
		{"a dependency's output as a variable that is not a name", func(r *infrav1.TerraformRun) {
			r.Spec.DependsOn = []infrav1.Dependency{{Name: "net", Outputs: &infrav1.DependencyOutputs{Select: []infrav1.OutputVariable{{Output: "vpc_id", As: "1vpc"}}}}}
		}, "spec.dependsOn[0].outputs.select[0].as"},
		{"name too long for engine objects", func(r *infrav1.TerraformRun) { r.Name = "a-very-long-terraform-run-name-that-exceeds-forty-characters" }, "metadata.name must be at most 40 characters"},
	}
}
