//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/tenancy"
)

// The people of the tenant scenario (test/e2e/cluster.sh makes their
// client certificates): mallory and trent hold Kubernetes' edit role (with
// Argo's and Tekton's aggregated rules) and opr8r-editor in e2e, trent also
// opr8r-approver; alice approves in e2e; eve is a tenant of default, the
// namespace next door.
const (
	mallory, trent, eve = "mallory", "trent", "eve"
	trentUser           = "opr8r-e2e-trent"
	aliceUser           = "opr8r-e2e-alice"
)

// attack is one try of the tenant scenario and what came of it, for the
// table docs/security.md shows (bin/e2e/attack-table.md).
type attack struct {
	Engine, Attack, Outcome string
}

var (
	attacksMu sync.Mutex
	attacks   []attack
)

// The outcomes of a try that did not go as the test wants.
const (
	notRefused = "NOT REFUSED"
	notSaying  = "refused, but not saying "
)

func recordAttack(engine, what, outcome string) {
	attacksMu.Lock()
	defer attacksMu.Unlock()
	attacks = append(attacks, attack{engine, what, outcome})
}

// writeAttackTable writes every attack tried, by engine, with its outcome.
func writeAttackTable(t *testing.T) {
	attacksMu.Lock()
	defer attacksMu.Unlock()
	sort.SliceStable(attacks, func(i, j int) bool { return attacks[i].Attack < attacks[j].Attack })
	row := func(a attack) string {
		return fmt.Sprintf("| %s | %s | %s |\n", a.Attack, a.Engine, strings.ReplaceAll(a.Outcome, "|", "/"))
	}
	var b, wrong strings.Builder
	b.WriteString("| attack | engine | outcome |\n| --- | --- | --- |\n")
	for _, a := range attacks {
		b.WriteString(row(a))
		if strings.HasPrefix(a.Outcome, notRefused) || strings.HasPrefix(a.Outcome, notSaying) {
			wrong.WriteString(row(a))
		}
	}
	if p := os.Getenv("OPR8R_E2E_ATTACK_TABLE"); p != "" {
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Errorf("writing the attack table: %v", err)
		}
	}
	// The tries that went wrong again, last: the end of the table is what
	// run.sh's output shows next to the test's "--- FAIL" line.
	if wrong.Len() > 0 {
		b.WriteString("| **not refused as wanted:** | | |\n" + wrong.String())
	}
	t.Logf("attacks tried:\n%s", b.String())
}

// approveNotCounted: user's kubectl tfrun approve (user "": the admin) is
// refused by the plugin, since the run's approval policy would not count it
// (want says why), and records nothing; the same approval made without the
// plugin is stamped with the user's name, for the manager to ignore. It
// returns what the plugin printed.
func (e *env) approveNotCounted(t *testing.T, user, name, want string, run *infrav1.TerraformRun) string {
	t.Helper()
	as := func(stdin, bin string, args ...string) (string, error) {
		out, err := e.as(user, stdin, bin, args...)
		t.Logf("$ (as %s) %s %s\n%s", cmp.Or(user, "the admin"), filepath.Base(bin), strings.Join(args, " "), out)
		return out, err
	}
	out, err := as("", e.tfrun, "approve", name, "-n", ns)
	if err == nil || !strings.Contains(out, "would not count: "+want) || !strings.Contains(out, "nothing was recorded") {
		t.Fatalf("kubectl tfrun approve %s as %s: %v\n%s\nwant a non-zero exit saying the approval would not count (%s), and that nothing was recorded", name, cmp.Or(user, "the admin"), err, out, want)
	}
	approval := fmt.Sprintf(`apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRunApproval
metadata:
  generateName: %s-
  namespace: %s
  ownerReferences: [{apiVersion: infra.opr8r.io/v1alpha1, kind: TerraformRun, name: %s, uid: %s}]
spec: {runName: %s, planDigest: %q, decision: Approve}
`, name, ns, name, run.UID, name, run.Status.Plan.Digest)
	if created, err := as(approval, e.kubectl, "create", "-f", "-"); err != nil {
		t.Fatalf("creating a TerraformRunApproval of %s without the plugin: %v\n%s", name, err, created)
	}
	return out
}

// as runs a command as one of the cluster's people (user "": the admin),
// with stdin; it returns the output and whether it failed, without failing
// the test.
func (e *env) as(user, stdin, name string, args ...string) (string, error) {
	kubeconfig := e.kubeconfig
	if user != "" {
		kubeconfig = filepath.Join(filepath.Dir(e.kubeconfig), user+".kubeconfig")
	}
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// refused tries a tenant's write and requires the API server to refuse it
// at admission, with a message that holds every want; it records the try.
// Not a t.Helper: its messages name its own lines, so that run.sh's
// failures.awk tells its Errorf from its Logf (what names the attack).
func (e *env) refused(t *testing.T, engine, what, user, stdin string, wants []string, args ...string) {
	out, err := e.as(user, stdin, e.kubectl, args...)
	t.Logf("$ (as %s) kubectl %s\n%s", user, strings.Join(args, " "), out)
	if err == nil {
		recordAttack(engine, what, notRefused)
		t.Errorf("%s: (as %s) kubectl %s was admitted, want it refused:\n%s\n%s", what, user, strings.Join(args, " "), out, e.guardState())
		return
	}
	if strings.Contains(out, "Error from server (Conflict)") {
		// Optimistic concurrency answered before admission: the write
		// was never judged, which is not a refusal.
		recordAttack(engine, what, notSaying+"an admission refusal (got a 409 Conflict)")
		t.Errorf("%s: (as %s) kubectl %s was answered with a conflict, not judged by admission:\n%s", what, user, strings.Join(args, " "), out)
		return
	}
	for _, w := range wants {
		if !strings.Contains(out, w) {
			recordAttack(engine, what, notSaying+w)
			t.Errorf("%s: refused without %q:\n%s\n%s", what, w, out, e.guardState())
			return
		}
	}
	recordAttack(engine, what, "refused: "+oneLine(admissionReason(out), 160))
}

// guardState is what the policies read about the namespace's active
// children when an attack was not refused as it should have been.
func (e *env) guardState() string {
	cm := &corev1.ConfigMap{}
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: tenancy.GuardConfigMap}, cm); err != nil {
		return "ConfigMap " + tenancy.GuardConfigMap + ": " + err.Error()
	}
	return fmt.Sprintf("ConfigMap %s (resourceVersion %s): %s %q, %s %q", tenancy.GuardConfigMap, cm.ResourceVersion,
		tenancy.GuardChildrenKey, cm.Data[tenancy.GuardChildrenKey], tenancy.GuardRunnersKey, cm.Data[tenancy.GuardRunnersKey])
}

// admissionReason is the refusal's own words, without kubectl's preamble.
func admissionReason(out string) string {
	if i := strings.Index(out, "denied request: "); i >= 0 {
		return out[i+len("denied request: "):]
	}
	if i := strings.Index(out, "Error from server"); i >= 0 {
		return out[i:]
	}
	return out
}

// object reads one object as JSON.
func (e *env) object(t *testing.T, gvk schema.GroupVersionKind, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		t.Fatalf("get %s %s: %v", gvk.Kind, name, err)
	}
	return u
}

func jsonOf(t *testing.T, u *unstructured.Unstructured) string {
	t.Helper()
	b, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	workflowGVK  = schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "Workflow"}
	pipelineGVK  = schema.GroupVersionKind{Group: "tekton.dev", Version: "v1", Kind: "PipelineRun"}
	customRunGVK = schema.GroupVersionKind{Group: "tekton.dev", Version: "v1beta1", Kind: "CustomRun"}
	jobGVK       = schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}
)

// securedModule reads the token the runner's identity projects, as a
// cloud provider would, and says whether it is there; it never prints it.
const securedModule = `
variable "greeting" { type = string }
resource "terraform_data" "hello" { input = var.greeting }
output "message" { value = terraform_data.hello.output }
output "identity_token_present" {
  value = fileexists("/opr8r/identity/token") && length(file("/opr8r/identity/token")) > 100
}
`

// identityAudience is the audience of the runner's projected token: the
// one a cloud's trust policy would name.
const identityAudience = "sts.opr8r.e2e"

func securedManifest(name, engine, greeting string) string {
	files, _ := json.Marshal(map[string]string{"main.tf": securedModule})
	return fmt.Sprintf(`apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRun
metadata: {name: %s, namespace: %s}
spec:
  engine: %s
  source: {inline: {files: %s}}
  terraform:
    vars: [{name: greeting, value: %q}]
  approval: {mode: Manual, timeout: 30m, selfApproval: Forbidden}
  deletionPolicy: Destroy
  runner:
    workspace: {size: 64Mi}
    identityToken: {audience: %s, envName: CLOUD_IDENTITY_TOKEN_FILE}
`, name, ns, engine, files, greeting, identityAudience)
}

// TestTenants: tenants who hold edit and opr8r's editor role in their
// namespace try each attack of docs/security.md on a run of every engine;
// each is refused at admission or has no effect, and the run is approved,
// applied and destroyed only as its policy says.
func TestTenants(t *testing.T) {
	// Not parallel with the other scenarios: it runs first, its engines
	// side by side, and they follow. Its runs hold plans (and Tekton's
	// affinity assistant pods) waiting for minutes while it attacks them;
	// beside every other scenario that filled the 2-core node's requests
	// (make e2e once: drift-tekton's apply pod Pending on
	// ExceededNodeResources until its 6-minute wait ran out).
	e := setup(t)
	t.Cleanup(func() { writeAttackTable(t) })
	t.Run("manager", func(t *testing.T) { e.managerRights(t) })
	t.Run("runner-settings", func(t *testing.T) { e.runnerSettingsRefused(t) })
	t.Run("cross-namespace", func(t *testing.T) { e.dependencyNeedsConsent(t) })
	t.Run("namespace-deletion", func(t *testing.T) { e.namespaceDeletion(t) })
	t.Run("editor-references", func(t *testing.T) { e.editorReadsNothing(t) })
	t.Run("cache-claim", func(t *testing.T) { e.cacheClaimRefused(t) })
	for _, engine := range allEngines() {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			e.tenantAttacks(t, engine)
		})
	}
}

// managerRights: the README's install line gives a manager that may read
// Secrets only in the namespaces it watches (the real authorizer answers).
func (e *env) managerRights(t *testing.T) {
	sa := "system:serviceaccount:opr8r-system:opr8r"
	for _, c := range []struct {
		namespace string
		want      string
	}{{"e2e", "yes"}, {"kube-system", "no"}, {"argo", "no"}, {"opr8r-system", "no"}} {
		out, _ := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "auth", "can-i", "list", "secrets", "-n", c.namespace, "--as", sa).CombinedOutput()
		got := strings.TrimSpace(string(out))
		if got != c.want {
			t.Errorf("the manager may list Secrets in %s: %q, want %q", c.namespace, got, c.want)
		}
		recordAttack("all", "the manager reads Secrets in "+c.namespace, "can-i list secrets: "+got)
	}
	// Checks run as opr8r-check, which reads no Secret.
	out, _ := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "auth", "can-i", "get", "secrets", "-n", ns, "--as", "system:serviceaccount:e2e:opr8r-check").CombinedOutput()
	if got := strings.TrimSpace(string(out)); got != "no" {
		t.Errorf("the checks' service account may read Secrets: %q", got)
	}
	recordAttack("all", "a check reads the namespace's Secrets", "opr8r-check can-i get secrets: "+strings.TrimSpace(string(out)))
}

// runnerSettingsRefused: runner settings that escape the runner policy are
// refused at admission, naming the field.
func (e *env) runnerSettingsRefused(t *testing.T) {
	base := securedManifest("settings", "job", "Hi")
	for _, c := range []struct{ what, from, to, want string }{
		{"an environment variable that preloads a library", "  approval:", "    env: [{name: LD_PRELOAD, secretKeyRef: {name: x, key: value}}]\n  approval:", "spec.terraform.env name LD_PRELOAD is reserved"},
		{"a CLI config pointing terraform at another provider", "  approval:", "    env: [{name: TF_CLI_CONFIG_FILE, secretKeyRef: {name: x, key: value}}]\n  approval:", "TF_CLI_CONFIG_FILE is reserved"},
		{"a provider mirror other than the install's", "  approval:", "    env: [{name: OPR8R_PROVIDER_MIRROR, secretKeyRef: {name: x, key: value}}]\n  approval:", "spec.terraform.env name OPR8R_PROVIDER_MIRROR is reserved"},
		{"a file mounted over the service-account token", "  approval:", "    files: [{secretName: x, mountPath: /var/run/secrets/kubernetes.io/serviceaccount}]\n  approval:", "would hide or replace a system or runner directory"},
		{"a step group of 0 (root's)", "    workspace: {size: 64Mi}", "    workspace: {size: 64Mi}\n    securityContext: {runAsGroup: 0}", "spec.runner.securityContext.runAsGroup"},
		{"a check image no policy allows", "  deletionPolicy: Destroy", "  checks: [{name: scan, image: evil.example/miner:1, command: [scan]}]\n  deletionPolicy: Destroy", "spec.checks[].image: evil.example/miner:1 is not allowed"},
		{"a toleration of the control plane's taint", "    workspace: {size: 64Mi}", "    workspace: {size: 64Mi}\n    tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists}]", "spec.runner.tolerations"},
	} {
		m := strings.Replace(strings.Replace(base, "namespace: "+ns, "namespace: "+restrictedNS, 1), c.from, c.to, 1)
		e.refused(t, "all", c.what, mallory, m, []string{c.want}, "apply", "--dry-run=server", "-f", "-")
	}
}

// restrictedNS is a namespace a runner policy restricts (made by
// cluster.sh with mallory's rights), so that the policy does not apply to
// the other scenarios' runs.
const restrictedNS = "e2e-restricted"

// dependencyNeedsConsent: eve's run next door may not take a run of e2e as
// its dependency unless that run consents (spec.allowDependentsFrom).
func (e *env) dependencyNeedsConsent(t *testing.T) {
	name := "eve-reads-e2e"
	t.Cleanup(func() {
		_ = e.c.Delete(context.Background(), &infrav1.TerraformRun{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}})
	})
	m := strings.Replace(strings.Replace(securedManifest(name, "job", "Hi"), "namespace: "+ns, "namespace: default", 1),
		"  deletionPolicy: Destroy", "  dependsOn: [{name: sec-job, namespace: e2e}]\n  deletionPolicy: Destroy", 1)
	if out, err := e.as(eve, m, e.kubectl, "apply", "-f", "-"); err != nil {
		t.Fatalf("eve's run: %v\n%s", err, out)
	}
	run := e.waitIn(t, "default", name, "refused its dependency", 2*time.Minute, func(r *infrav1.TerraformRun) bool {
		return condReason(r, infrav1.StalledCondition) == "True/"+infrav1.ReasonCrossNamespaceDependency
	})
	if run.Status.Run != nil {
		t.Fatalf("eve's run started %s without the dependency's consent", run.Status.Run.ID)
	}
	recordAttack("job", "depend on another namespace's run without its consent", "Stalled "+infrav1.ReasonCrossNamespaceDependency+", no run")
}

// tenantAttacks runs the scenario on one engine: trent writes a change
// (selfApproval Forbidden), mallory attacks the run while its plan waits,
// a colleague's edit does not launder trent's authorship, alice approves,
// the runner's projected identity reaches the steps (and no check), and
// mallory's delete destroys only after alice approves the destroy's plan.
func (e *env) tenantAttacks(t *testing.T, engine string) {
	name := "sec-" + engine
	t.Cleanup(func() { _ = e.c.Delete(context.Background(), &infrav1.TerraformRun{ObjectMeta: objMeta(name)}) })
	if out, err := e.as(trent, securedManifest(name, engine, "Hello"), e.kubectl, "apply", "-f", "-"); err != nil {
		t.Fatalf("trent's run: %v\n%s", err, out)
	}
	run := e.waitFor(t, name, "a plan awaiting approval", 5*time.Minute, awaiting(""))
	child := run.Status.Run.Child.Name

	e.attackTheChild(t, engine, name, child)
	e.attackTheRunner(t, engine, name, child)
	e.attackThePolicy(t, engine, name)
	e.attackThePlanRecord(t, engine, name, child)

	// mallory changes what the run executes: the plan is superseded and
	// the new one has two authors, neither of whom may approve it.
	patch := `{"spec":{"terraform":{"vars":[{"name":"greeting","value":"Hello from mallory"}]}}}`
	if out, err := e.as(mallory, "", e.kubectl, "patch", "tfrun", name, "-n", ns, "--type=merge", "-p", patch); err != nil {
		t.Fatalf("mallory's edit: %v\n%s", err, out)
	}
	run = e.waitFor(t, name, "the edited spec's plan awaiting approval", 5*time.Minute, awaiting(child))
	if got := strings.Join(run.Status.Run.Authors, ","); got != "opr8r-e2e-mallory,"+trentUser {
		t.Fatalf("the run's authors are %q, want mallory's and trent's", got)
	}
	// kubectl tfrun approve tells trent his approval would not count, and
	// records nothing; one he makes without the plugin is ignored.
	out := e.approveNotCounted(t, trent, name, "an author of the change may not approve it", run)
	recordAttack(engine, "an author approves with kubectl tfrun after a colleague's unrelated edit (selfApproval Forbidden)", "refused by the plugin, nothing recorded: "+oneLine(out, 100))
	run = e.waitFor(t, name, "trent's approval ignored", time.Minute, func(r *infrav1.TerraformRun) bool {
		a := r.Status.Approvals
		return a != nil && len(a.Ignored) > 0 && a.Ignored[0].User == trentUser
	})
	if runPhase(run) != infrav1.RunAwaitingApproval {
		t.Fatalf("after trent's approval the run is %s, want still AwaitingApproval", runPhase(run))
	}
	recordAttack(engine, "an author approves after a colleague's unrelated edit (selfApproval Forbidden)", "ignored: "+oneLine(run.Status.Approvals.Ignored[0].Reason, 120))

	// alice reads the plan she approves without any right to read Secrets.
	if out := e.shAs(t, "alice", e.tfrun, "plan", name, "-n", ns); !strings.Contains(out, "verified") {
		t.Fatalf("alice's kubectl tfrun plan shows no verified plan:\n%s", out)
	}
	e.shAs(t, "alice", e.tfrun, "approve", name, "-n", ns)
	run = e.waitFor(t, name, "applied and Ready", 5*time.Minute, ready)
	if a := run.Status.Approval; a == nil || a.By != aliceUser {
		t.Fatalf("approval = %+v, want alice's", a)
	}
	outputs, _ := e.state(t, name)
	if present, _ := outputs["identity_token_present"].(bool); !present {
		t.Fatalf("the projected identity token did not reach terraform: outputs %v", outputs)
	}
	e.identityOnlyInTerraformSteps(t, engine, name)
	recordAttack(engine, "the runner's cloud identity", "a projected token for "+identityAudience+" in the terraform steps only")

	// mallory deletes the run: the destroy waits for approval like an apply,
	// and mallory may not let it go without.
	if out, err := e.as(mallory, "", e.kubectl, "delete", "tfrun", name, "-n", ns, "--wait=false"); err != nil {
		t.Fatalf("mallory's delete: %v\n%s", err, out)
	}
	run = e.waitFor(t, name, "the destroy's plan awaiting approval", 5*time.Minute, func(r *infrav1.TerraformRun) bool {
		return r.Status.Run != nil && r.Status.Run.Type == infrav1.RunDestroy && runPhase(r) == infrav1.RunAwaitingApproval
	})
	e.refused(t, engine, "destroy without approval (annotation destroy-without-approval)", mallory, "", []string{"destroy-without-approval", "opr8r-policy-admin"},
		"annotate", "tfrun", name, "-n", ns, infrav1.DestroyWithoutApprovalAnnotation+"=true")
	time.Sleep(5 * time.Second)
	if _, resources := e.state(t, name); resources != 1 {
		t.Fatalf("the state holds %d resources before the destroy was approved, want 1", resources)
	}
	recordAttack(engine, "kubectl delete destroys everything at once", "the destroy waits at its gate (Manual)")
	if out := e.shAs(t, "alice", e.tfrun, "plan", name, "-n", ns); !strings.Contains(out, "verified") || !strings.Contains(out, "destroy") {
		t.Fatalf("alice's kubectl tfrun plan of the destroy:\n%s", out)
	}
	e.shAs(t, "alice", e.tfrun, "approve", name, "-n", ns)
	e.goneIn(t, ns, name, "destroyed after alice's approval", 5*time.Minute)
	if _, resources := e.state(t, name); resources != 0 {
		t.Fatalf("the state holds %d resources after the destroy", resources)
	}
}

// attackTheChild: mallory edits the engine's object to pass the gate, name
// an approver, change a later step or skip the gate.
func (e *env) attackTheChild(t *testing.T, engine, name, child string) {
	refusedEdit := func(what string, gvk schema.GroupVersionKind, objName string, change func(u *unstructured.Unstructured), wants ...string) {
		u := e.object(t, gvk, objName)
		orig := u.DeepCopy()
		change(u)
		// A merge patch of what the attacker changes, without a
		// resourceVersion: the API server applies it to the object as it
		// is. Not kubectl replace: with no resourceVersion it reads the
		// object's and sends that, and the engine, which changes its
		// object all the while, made it stale in between (a 409 Conflict
		// before admission said anything: stop 45's CI, job).
		patch, err := client.MergeFrom(orig).Data(u)
		if err != nil {
			t.Fatal(err)
		}
		resource := strings.ToLower(gvk.Kind) + "s." + gvk.Group
		e.refused(t, engine, what, mallory, string(patch), wants, "patch", resource, objName, "-n", ns, "--type=merge", "--patch-file=/dev/stdin")
	}
	switch engine {
	case "argo":
		refusedEdit("skip the gate: suspend.duration on the approve template", workflowGVK, child, func(u *unstructured.Unstructured) {
			tmpls, _, _ := unstructured.NestedSlice(u.Object, "spec", "templates")
			for i, tm := range tmpls {
				if m := tm.(map[string]any); m["name"] == "approve" {
					m["suspend"] = map[string]any{"duration": "1s"}
					tmpls[i] = m
				}
			}
			_ = unstructured.SetNestedSlice(u.Object, tmpls, "spec", "templates")
		}, "may not change the spec")
		refusedEdit("pass the gate: rename the approve node and set it Succeeded", workflowGVK, child, func(u *unstructured.Unstructured) {
			nodes, _, _ := unstructured.NestedMap(u.Object, "status", "nodes")
			for id, n := range nodes {
				if m := n.(map[string]any); m["displayName"] == "approve" {
					m["displayName"], m["phase"] = "approved", "Succeeded"
					nodes[id] = m
				}
			}
			_ = unstructured.SetNestedMap(u.Object, nodes, "status", "nodes")
		}, "may not change the status")
		refusedEdit("name the approver: the gate-decided-by stamp", workflowGVK, child, func(u *unstructured.Unstructured) {
			a := u.GetAnnotations()
			a["infra.opr8r.io/gate-decided-by"] = aliceUser
			u.SetAnnotations(a)
		}, "stamped by the API server")
		refusedEdit("hide the gate in compressed node status", workflowGVK, child, func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "H4sIAAAAAAAA/6quBQQAAP//Q7+m6QIAAAA=", "status", "compressedNodes")
		}, "compressed")
		e.refused(t, engine, "forge the plan step's results (a WorkflowTaskResult)", mallory, fmt.Sprintf(`apiVersion: argoproj.io/v1alpha1
kind: WorkflowTaskResult
metadata: {name: %s-forged, namespace: %s, labels: {workflows.argoproj.io/workflow: %s}}
outputs: {parameters: [{name: digest, value: "sha256:00"}]}
`, child, ns, child), nil, "create", "-f", "-")
	case "tekton":
		refusedEdit("make the gate not opr8r's: customRef.kind", customRunGVK, child+"-approve", func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "Other", "spec", "customRef", "kind")
		}, "may not change")
		out, err := e.as(mallory, `{"status":{"conditions":[{"type":"Succeeded","status":"True","reason":"Approved"}]}}`, e.kubectl,
			"patch", "customrun", child+"-approve", "-n", ns, "--subresource=status", "--type=merge", "--patch-file=/dev/stdin")
		if err == nil {
			t.Errorf("mallory decided the Tekton gate by writing its status:\n%s", out)
			recordAttack(engine, "pass the gate: write the CustomRun's status", notRefused)
		} else {
			recordAttack(engine, "pass the gate: write the CustomRun's status", "refused: "+oneLine(admissionReason(out), 120))
		}
		refusedEdit("change a later step: the apply task's image", pipelineGVK, child, func(u *unstructured.Unstructured) {
			tasks, _, _ := unstructured.NestedSlice(u.Object, "spec", "pipelineSpec", "tasks")
			for i, tk := range tasks {
				if m := tk.(map[string]any); m["name"] == "apply" {
					steps, _, _ := unstructured.NestedSlice(m, "taskSpec", "steps")
					for j := range steps {
						steps[j].(map[string]any)["image"] = "evil.example/root:1"
					}
					_ = unstructured.SetNestedSlice(m, steps, "taskSpec", "steps")
					tasks[i] = m
				}
			}
			_ = unstructured.SetNestedSlice(u.Object, tasks, "spec", "pipelineSpec", "tasks")
		}, "may not change")
	case "job":
		refusedEdit("pass the gate: the child Job's gate annotations", jobGVK, child, func(u *unstructured.Unstructured) {
			a := u.GetAnnotations()
			a["infra.opr8r.io/gate-decision"], a["infra.opr8r.io/gate-decided-by"] = "approve", aliceUser
			u.SetAnnotations(a)
		}, "infra.opr8r.io/")
		refusedEdit("change a later step: the child Job's step list", jobGVK, child, func(u *unstructured.Unstructured) {
			a := u.GetAnnotations()
			a["infra.opr8r.io/steps"] = `[{"Name":"apply","Image":"evil.example/root:1","Command":["sh"]}]`
			u.SetAnnotations(a)
		}, "infra.opr8r.io/")
		refusedEdit("skip the gate: the child Job's approval mode", jobGVK, child, func(u *unstructured.Unstructured) {
			a := u.GetAnnotations()
			a["infra.opr8r.io/approval"] = "auto"
			u.SetAnnotations(a)
		}, "infra.opr8r.io/")
	}
	// A newer pod of the plan step, made by someone else, would change the
	// plan approvers see (and an engine adopts a pod of its name).
	var fake string
	switch engine {
	case "argo":
		fake = fmt.Sprintf(`{"metadata":{"name":"%s-plan-forged","labels":{"workflows.argoproj.io/workflow":"%s"}}}`, child, child)
	case "tekton":
		fake = fmt.Sprintf(`{"metadata":{"name":"%s-plan-pod-retry9","labels":{"tekton.dev/taskRun":"%s-plan"}}}`, child, child)
	case "job":
		uid := e.object(t, jobGVK, child).GetUID()
		fake = fmt.Sprintf(`{"metadata":{"name":"%s-plan-forged","labels":{"batch.kubernetes.io/controller-uid":"%s","batch.kubernetes.io/job-name":"%s"}}}`, child, uid, child)
	}
	e.refused(t, engine, "a newer, forged plan pod", mallory, podJSON(t, fake, "default"), nil, "create", "-f", "-")
	recordAttack(engine, "opr8r reads a step's result from a pod it did not make", "no effect: only the engine's own step objects are read (unit and contract tests)")
}

// podJSON is a pod with the metadata given, running as sa.
func podJSON(t *testing.T, metadata, sa string) string {
	t.Helper()
	p := map[string]any{}
	if err := json.Unmarshal([]byte(metadata), &p); err != nil {
		t.Fatal(err)
	}
	p["apiVersion"], p["kind"] = "v1", "Pod"
	p["metadata"].(map[string]any)["namespace"] = ns
	p["spec"] = map[string]any{"serviceAccountName": sa, "restartPolicy": "Never",
		"containers": []any{map[string]any{"name": "main", "image": "localhost/opr8r/opr8r:e2e", "command": []any{"/opr8r-step", "install"}}}}
	b, _ := json.Marshal(p)
	return string(b)
}

// attackTheRunner: mallory tries to act as the runner, whose rights an
// approval is meant to guard.
func (e *env) attackTheRunner(t *testing.T, engine, name, child string) {
	e.refused(t, engine, "run a pod as the runner's service account", mallory,
		podJSON(t, `{"metadata":{"name":"mallory-as-runner-`+engine+`"}}`, "opr8r-runner"), []string{"opr8r-runner"}, "create", "-f", "-")
	e.refused(t, engine, "mint a token for the runner's service account", mallory, "", nil, "create", "token", "opr8r-runner", "-n", ns)
	e.refused(t, engine, "a Job of her own running as the runner", mallory, fmt.Sprintf(`{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"mallory-job-%s","namespace":"%s"},
"spec":{"template":{"spec":{"serviceAccountName":"opr8r-runner","restartPolicy":"Never","containers":[{"name":"x","image":"localhost/opr8r/opr8r:e2e"}]}}}}`, engine, ns),
		[]string{"opr8r-runner"}, "create", "-f", "-")
	e.refused(t, engine, "annotate the runner's service account (its cloud identity)", mallory, "", nil,
		"annotate", "serviceaccount", "opr8r-runner", "-n", ns, "eks.amazonaws.com/role-arn=arn:aws:iam::1:role/admin")
	pods := &corev1.PodList{}
	if err := e.c.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels{infrav1.RunNameLabel: name, infrav1.StepLabel: "plan"}); err != nil || len(pods.Items) == 0 {
		t.Fatalf("the plan step's pod of %s: %v (%d)", name, err, len(pods.Items))
	}
	plan := pods.Items[0].Name
	// The exec request itself, as kubectl exec sends it (kubectl exec
	// refuses a finished pod before it asks; the step's pod may be done).
	e.refused(t, engine, "exec into a step's pod (its token, its cloud identity)", mallory, "", []string{"opr8r-guard-connect"},
		"create", "--raw", "/api/v1/namespaces/"+ns+"/pods/"+plan+"/exec?command=true&stdout=true", "-f", "/dev/null")
	// Argo's controller runs the command in a pod's kill-cmd annotation
	// when it stops a step: a way to exec through it.
	e.refused(t, engine, "annotate a step's pod (Argo's kill-cmd)", mallory, "", []string{"opr8r-runner-pods"},
		"annotate", "pod", plan, "-n", ns, "workflows.argoproj.io/kill-cmd-main=[\"sh\",\"-c\",\"curl evil\"]")
}

// attackThePolicy: the authors and editors the policy constrains try to
// loosen it.
func (e *env) attackThePolicy(t *testing.T, engine, name string) {
	for _, c := range []struct{ what, user, patch, want string }{
		{"an editor switches the run to Auto", mallory, `{"spec":{"approval":{"mode":"Auto"}}}`, "spec.approval.mode"},
		{"the author allows self-approval of the plan waiting", trent, `{"spec":{"approval":{"selfApproval":"Allowed"}}}`, "spec.approval.selfApproval"},
		{"an editor adds a rule that approves every plan", mallory, `{"spec":{"approval":{"rules":[{"name":"all","condition":"true","effect":"AutoApprove"}]}}}`, "spec.approval.rules"},
		{"an editor widens the approvers", mallory, `{"spec":{"approval":{"approvers":{"users":["opr8r-e2e-mallory"]}}}}`, ""},
	} {
		wants := []string{"terraformruns/approvalpolicy"}
		if c.want != "" {
			wants = append(wants, c.want)
		}
		if c.want == "" {
			// Setting approvers where anyone could decide tightens: allowed.
			out, err := e.as(c.user, "", e.kubectl, "patch", "tfrun", name, "-n", ns, "--type=merge", "--dry-run=server", "-p", c.patch)
			if err != nil {
				t.Errorf("%s: a tightening was refused: %v\n%s", c.what, err, out)
			}
			recordAttack(engine, "narrow the approvers to oneself (with selfApproval Forbidden)", "admitted: it tightens (the author may still not approve)")
			continue
		}
		e.refused(t, engine, c.what, c.user, "", wants, "patch", "tfrun", name, "-n", ns, "--type=merge", "-p", c.patch)
	}
	e.refused(t, engine, "an editor forges the authors annotation", mallory, "", []string{"spec-authors"},
		"annotate", "--overwrite", "tfrun", name, "-n", ns, infrav1.SpecAuthorsAnnotation+"=1 nobody")
}

// attackThePlanRecord: what the approver reads is what the plan step
// wrote: a record changed afterwards is refused by kubectl tfrun plan, and
// the tenant cannot write it in the first place.
func (e *env) attackThePlanRecord(t *testing.T, engine, name, child string) {
	secrets := &corev1.SecretList{}
	if err := e.c.List(context.Background(), secrets, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		if s.Name == child+"-plan" {
			s.Data["plan.txt"] = []byte("  # nothing to see here\n")
			s.ResourceVersion = ""
			s.APIVersion, s.Kind = "v1", "Secret"
			b, _ := json.Marshal(s)
			e.refused(t, engine, "overwrite the readable plan's Secret", mallory, string(b), nil, "replace", "-f", "-")
		}
	}
	records := &unstructured.UnstructuredList{}
	records.SetGroupVersionKind(schema.GroupVersionKind{Group: "infra.opr8r.io", Version: "v1alpha1", Kind: "TerraformRunRecordList"})
	if err := e.c.List(context.Background(), records, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, r := range records.Items {
		if !strings.HasPrefix(r.GetName(), child+"-") {
			continue
		}
		r.SetResourceVersion("")
		e.refused(t, engine, "rewrite a plan record as the runner (kubectl --as the runner)", mallory, jsonOf(t, &r), nil,
			"replace", "-f", "-", "--as=system:serviceaccount:e2e:opr8r-runner")
		break
	}
	if out := e.shAs(t, "alice", e.tfrun, "plan", name, "-n", ns); !strings.Contains(out, "verified") {
		t.Fatalf("alice's kubectl tfrun plan after the attacks:\n%s", out)
	}
	out := e.shAs(t, "alice", e.tfrun, "plan", name, "-n", ns, "--json")
	if strings.Contains(out, `"identity_token_present":{"sensitive":false`) && !json.Valid([]byte(out)) {
		t.Fatalf("kubectl tfrun plan --json is not JSON:\n%s", out)
	}
	if _, err := e.as("alice", "", e.tfrun, "plan", name, "-n", ns, "--json", "--show-sensitive"); err == nil {
		t.Errorf("alice, who may not read Secrets, read the plan with its sensitive values")
	}
	recordAttack(engine, "an approver without Secret rights reads the plan", "kubectl tfrun plan: verified against status; --show-sensitive refused")
}

// identityOnlyInTerraformSteps: the run's apply pod projects the token for
// the audience; no pod of a check does.
func (e *env) identityOnlyInTerraformSteps(t *testing.T, engine, name string) {
	pods := &corev1.PodList{}
	if err := e.c.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels{infrav1.RunNameLabel: name}); err != nil {
		t.Fatal(err)
	}
	projected := map[string]bool{}
	for _, p := range pods.Items {
		for _, v := range p.Spec.Volumes {
			if v.Projected == nil {
				continue
			}
			for _, src := range v.Projected.Sources {
				if src.ServiceAccountToken != nil && src.ServiceAccountToken.Audience == identityAudience {
					projected[p.Labels[infrav1.StepLabel]] = true
				}
			}
		}
	}
	if !projected["apply"] || !projected["plan"] {
		t.Errorf("%s: the identity token is projected into %v, want plan and apply", engine, projected)
	}
}
