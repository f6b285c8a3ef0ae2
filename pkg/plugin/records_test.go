package plugin_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/plugin"
	"github.com/opr8r/opr8r/pkg/records"
	"github.com/opr8r/opr8r/test/envtestutil"
)

// setPlanDigests records, as the manager does from the plan step's
// results, the digests of a run's plan records in its status.
func setPlanDigests(t *testing.T, ns, name, text, js, sensitive string) {
	t.Helper()
	r := get(t, ns, name)
	r.Status.Plan.TextDigest, r.Status.Plan.JSONDigest, r.Status.Plan.SensitiveJSONDigest = text, js, sensitive
	if err := k8s.Status().Update(context.Background(), r); err != nil {
		t.Fatal(err)
	}
}

// kubectl tfrun plan and logs read what the steps kept, after the run's
// pods and engine objects are gone: a 5 MB plan whole, and a step's log of
// an older run in the history (--run), kept as the steps keep them
// (records.Router: TerraformRunRecords, the plan in clear in a Secret) or
// as they kept them before TerraformRunRecords (all in Secrets).
func TestPluginReadsKeptRecords(t *testing.T) {
	ns := seed(t)
	ctx := context.Background()
	store := records.NewRouter(cs, nil)
	var plan bytes.Buffer
	for i := 0; plan.Len() < 5<<20; i++ {
		fmt.Fprintf(&plan, "  # terraform_data.item[%d] will be created\n  + resource \"terraform_data\" \"item\" { input = \"%x\" }\n", i, i*7919)
	}
	plan.WriteString("Plan: 1 to add, 0 to change, 0 to destroy. [the end]\n")
	put := func(runID, step string, kind records.Kind, b []byte) {
		t.Helper()
		if err := store.Put(ctx, records.Key{Namespace: ns, Run: "waiting", RunID: runID, Step: step, Kind: kind}, b); err != nil {
			t.Fatal(err)
		}
	}
	masked := []byte(`{"format_version":"1.2","variables":{"password":{"value":"(sensitive value)"}}}`)
	clear := []byte(`{"format_version":"1.2","variables":{"password":{"value":"hunter22"}}}`)
	put("waiting-abc-1", "plan", records.KindPlanText, plan.Bytes())
	put("waiting-abc-1", "plan", records.KindPlanJSON, masked)
	put("waiting-abc-1", "plan", records.KindPlanJSONSensitive, clear)
	setPlanDigests(t, ns, "waiting", sha(plan.Bytes()), sha(masked), sha(clear))
	// done-1 ran before TerraformRunRecords: its log is in a Secret.
	if err := (&records.SecretStore{Client: cs}).Put(ctx, records.Key{Namespace: ns, Run: "done", RunID: "done-1", Step: "plan", Kind: records.KindLog}, []byte("opr8r-step: plan: +0 ~0 -0 of done-1\n")); err != nil {
		t.Fatal(err)
	}

	out, _, err := tfrun(ns, "plan", "waiting")
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 5<<20 || !strings.HasSuffix(out, "[the end]\n") || !strings.HasPrefix(out, "# plan "+digest) {
		t.Fatalf("kubectl tfrun plan printed %d bytes, ending %q: want the whole 5 MB plan", len(out), out[max(0, len(out)-60):])
	}
	js, _, err := tfrun(ns, "plan", "waiting", "--json")
	if err != nil || js != string(masked) {
		t.Fatalf("plan --json = %q, %v; want the masked JSON", js, err)
	}
	js, _, err = tfrun(ns, "plan", "waiting", "--json", "--show-sensitive")
	if err != nil || js != string(clear) {
		t.Fatalf("plan --json --show-sensitive = %q, %v; want the JSON in clear", js, err)
	}
	if _, _, err := tfrun(ns, "plan", "waiting", "--show-sensitive"); err == nil || !strings.Contains(err.Error(), "give --json too") {
		t.Fatalf("--show-sensitive without --json: %v", err)
	}

	// A record changed after the plan step wrote it (anyone who may write
	// Secrets, or TerraformRunRecords, can) is refused, of each kind.
	for _, k := range []records.Kind{records.KindPlanText, records.KindPlanJSON, records.KindPlanJSONSensitive} {
		put("waiting-abc-1", "plan", k, []byte("  # nothing to see here\nPlan: 0 to add, 0 to change, 0 to destroy.\n"))
		args := map[records.Kind][]string{records.KindPlanJSON: {"--json"}, records.KindPlanJSONSensitive: {"--json", "--show-sensitive"}}[k]
		out, _, err := tfrun(ns, append([]string{"plan", "waiting"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "it was changed after the plan step wrote it") || strings.Contains(out, "nothing to see here") {
			t.Fatalf("a forged %s record: printed %q, err = %v; want it refused", k, out, err)
		}
	}

	logs, _, err := tfrun(ns, "logs", "done", "--run", "done-1", "--step", "plan")
	if err != nil || logs != "opr8r-step: plan: +0 ~0 -0 of done-1\n" {
		t.Fatalf("logs --run done-1 = %q, %v", logs, err)
	}
	_, _, err = tfrun(ns, "logs", "done", "--run", "done-2", "--step", "apply")
	if err == nil || !strings.Contains(err.Error(), "no log of step apply of run done-2 is kept") {
		t.Fatalf("a log never kept: err = %v", err)
	}
	if got := get(t, ns, "done").Annotations["infra.opr8r.io/records-request"]; !strings.HasPrefix(got, "done-2@") {
		t.Fatalf("the manager was not asked to bring run done-2's records back from an object store: annotation %q", got)
	}
	_, _, err = tfrun(ns, "plan", "done", "--run", "done-9")
	if err == nil || !strings.Contains(err.Error(), "has no run done-9 in its history") {
		t.Fatalf("a run not in the history: err = %v", err)
	}
	out, _, err = tfrun(ns, "plan", "done", "--run", "done-2")
	if err == nil || !strings.Contains(err.Error(), "the readable plan of run done-2 is gone") {
		t.Fatalf("a plan that was not kept: %q, err = %v", out, err)
	}
}

// asRoleHolder is the clients of a user bound in ns, with a RoleBinding,
// to nothing but the ClusterRole of opr8r's file path (config/rbac/users),
// installed as it is written there.
func asRoleHolder(t *testing.T, ns, user, path string) (client.Client, kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	b, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), path))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(b, role); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	envtestutil.AwaitGrant(t, cs, ns, user, nil, role.Rules)
	cfg := rest.CopyConfig(restConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ucs := kubernetes.NewForConfigOrDie(cfg)
	// The premise: the role gives no right to read Secrets.
	if _, err := ucs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("%s may list Secrets in %s (%v): the test would prove nothing", user, ns, err)
	}
	return c, ucs
}

// A user bound only to opr8r-approver (or opr8r-editor) reads the plan
// they approve with kubectl tfrun plan, readable and as JSON masked,
// verified against the digests in status, and the steps' logs, without any
// right to read Secrets; the plan as JSON in clear, kept only in a Secret,
// is refused to them with why, and shown to who may read Secrets.
func TestApproverReadsPlansWithoutSecretRights(t *testing.T) {
	ns := seed(t)
	ctx := context.Background()
	owner := get(t, ns, "waiting")
	steps := records.NewRouter(cs, &metav1.OwnerReference{APIVersion: infrav1.GroupVersion.String(), Kind: "TerraformRun", Name: owner.Name, UID: owner.UID})
	var plan bytes.Buffer
	for i := 0; plan.Len() < 5<<20; i++ {
		fmt.Fprintf(&plan, "  # terraform_data.item[%d] will be created\n  + resource \"terraform_data\" \"item\" { input = \"%x\" }\n", i, i*7919)
	}
	plan.WriteString("Plan: 1 to add, 0 to change, 0 to destroy. [the end]\n")
	masked := []byte(`{"format_version":"1.2","variables":{"password":{"value":"(sensitive value)"}}}`)
	clear := []byte(`{"format_version":"1.2","variables":{"password":{"value":"hunter22"}}}`)
	kept := map[records.Kind][]byte{records.KindPlanText: plan.Bytes(), records.KindPlanJSON: masked, records.KindPlanJSONSensitive: clear,
		records.KindLog: []byte("opr8r-step: plan: +1 ~0 -0\n")}
	for kind, b := range kept {
		if err := steps.Put(ctx, records.Key{Namespace: ns, Run: "waiting", RunID: "waiting-abc-1", Step: "plan", Kind: kind}, b); err != nil {
			t.Fatal(err)
		}
	}
	setPlanDigests(t, ns, "waiting", sha(plan.Bytes()), sha(masked), sha(clear))
	if err := records.NewRouter(cs, nil).Put(ctx, records.Key{Namespace: ns, Run: "done", RunID: "done-1", Step: "apply", Kind: records.KindLog}, []byte("opr8r-step: apply: done-1\n")); err != nil {
		t.Fatal(err)
	}

	for role, path := range map[string]string{"approver": "config/rbac/users/approver.yaml", "editor": "config/rbac/users/editor.yaml"} {
		t.Run(role, func(t *testing.T) {
			c, ucs := asRoleHolder(t, ns, role+"-"+ns, path)
			out, _, err := tfrunWith(c, ucs, ns, "plan", "waiting")
			if err != nil {
				t.Fatalf("kubectl tfrun plan as %s: %v", role, err)
			}
			if !strings.HasPrefix(out, "# plan "+digest) || !strings.Contains(out, "verified") || !strings.HasSuffix(out, "[the end]\n") || len(out) < 5<<20 {
				t.Fatalf("kubectl tfrun plan as %s printed %d bytes, starting %q: want the whole verified plan", role, len(out), out[:min(len(out), 200)])
			}
			if js, _, err := tfrunWith(c, ucs, ns, "plan", "waiting", "--json"); err != nil || js != string(masked) {
				t.Fatalf("plan --json as %s = %q, %v; want the masked JSON", role, js, err)
			}
			// The run waits for approval: its pods may be listed by no
			// approver; the plan step's kept log is shown.
			if logs, _, err := tfrunWith(c, ucs, ns, "logs", "waiting", "--step", "plan"); err != nil || logs != string(kept[records.KindLog]) {
				t.Fatalf("logs of the waiting run's plan step as %s = %q, %v", role, logs, err)
			}
			if logs, _, err := tfrunWith(c, ucs, ns, "logs", "done", "--run", "done-1", "--step", "apply"); err != nil || logs != "opr8r-step: apply: done-1\n" {
				t.Fatalf("logs of a finished run as %s = %q, %v", role, logs, err)
			}
			out, _, err = tfrunWith(c, ucs, ns, "plan", "waiting", "--json", "--show-sensitive")
			if !errors.Is(err, plugin.ErrSensitiveForbidden) || !strings.Contains(err.Error(), "needs the right to read Secrets in namespace "+ns+", which you do not have") ||
				!strings.Contains(err.Error(), "kept only in a Secret; kubectl tfrun plan waiting --json shows it with them masked") || strings.Contains(out, "hunter22") {
				t.Fatalf("plan --json --show-sensitive as %s: printed %q, err = %v; want it refused, saying why", role, out, err)
			}
			t.Logf("refused to %s: %v", role, err)
		})
	}

	js, _, err := tfrun(ns, "plan", "waiting", "--json", "--show-sensitive")
	if err != nil || js != string(clear) {
		t.Fatalf("plan --json --show-sensitive as an admin = %q, %v; want the JSON in clear", js, err)
	}
}
