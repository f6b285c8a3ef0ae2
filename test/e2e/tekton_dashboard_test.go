//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// The Tekton side, as a person sees it: a real headless Chromium on the
// Tekton page of the e2e cluster (test/e2e/tektonview): the Tekton
// Dashboard's own components (@tektoncd/dashboard-components, from npm)
// with the dashboard's routes and its rule for turning TaskRuns into the
// task tree. The Tekton Dashboard application itself cannot be built here
// (docs/dashboards.md).

func tektonView(t *testing.T) string {
	v := os.Getenv("OPR8R_E2E_TEKTON_VIEW")
	if v == "" {
		t.Fatal("OPR8R_E2E_TEKTON_VIEW is not set (make e2e sets it to the Tekton page's NodePort)")
	}
	return strings.TrimSuffix(v, "/")
}

// tektonTask is one entry of a PipelineRun's task tree as the page drew it.
type tektonTask struct {
	Name, Succeeded, Reason string
	Steps                   []tektonStep
}

type tektonStep struct{ Name, Status, Reason string }

// tektonTreeJS reads the task tree (Task and Step of the dashboard
// components: data-succeeded and data-reason on each task, data-status and
// data-reason on each step of the expanded one).
const tektonTreeJS = `Array.from(document.querySelectorAll('ol.tkn--task-tree > li.tkn--task')).map(li => ({
  Name: (li.querySelector('.tkn--task-link--name') || {}).textContent || '',
  Succeeded: li.getAttribute('data-succeeded') || '',
  Reason: li.getAttribute('data-reason') || '',
  Steps: Array.from(li.querySelectorAll('li.tkn--step')).map(s => ({
    Name: ((s.querySelector('.tkn--step-name') || {}).textContent || '').trim(),
    Status: s.getAttribute('data-status') || '',
    Reason: s.getAttribute('data-reason') || ''
  }))
}))`

func (tk tektonTask) String() string {
	s := fmt.Sprintf("%s[%s/%s]", tk.Name, tk.Succeeded, tk.Reason)
	if len(tk.Steps) > 0 {
		var steps []string
		for _, st := range tk.Steps {
			steps = append(steps, fmt.Sprintf("%s:%s/%s", st.Name, st.Status, st.Reason))
		}
		s += "{" + strings.Join(steps, " ") + "}"
	}
	return s
}

func taskNamed(tree []tektonTask, name string) *tektonTask {
	for i := range tree {
		if tree[i].Name == name {
			return &tree[i]
		}
	}
	return nil
}

// pipelineRunURL is the page of a PipelineRun, with the dashboard's path and
// query parameters (pipelineTask, step).
func pipelineRunURL(view, pr string, query url.Values) string {
	u := fmt.Sprintf("%s/#/namespaces/%s/pipelineruns/%s", view, ns, pr)
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	return u
}

// open loads u as a new document. Going from one of the page's routes to
// another only changes the URL's fragment, and the document would show the
// route before until React renders the next: a check could read the
// previous PipelineRun's tree.
func open(ctx context.Context, u string) error {
	return chromedp.Do(ctx, chromedp.Navigate("about:blank"), chromedp.Navigate(u))
}

// waitTree opens u and reads the task tree until ok accepts it (nil when it
// does), or returns the last tree read and why it was not accepted.
func waitTree(ctx context.Context, u string, timeout time.Duration, ok func([]tektonTask) error) ([]tektonTask, error) {
	if err := open(ctx, u); err != nil {
		return nil, err
	}
	var tree []tektonTask
	var why error
	for deadline := time.Now().Add(timeout); ; time.Sleep(time.Second) {
		var err error
		if tree, err = chromedp.Run(ctx, chromedp.Evaluate[[]tektonTask](tektonTreeJS)); err != nil {
			return nil, err
		}
		if why = ok(tree); why == nil {
			return tree, nil
		}
		if time.Now().After(deadline) {
			return tree, fmt.Errorf("after %s: %w; the page shows %v", timeout, why, tree)
		}
	}
}

// awaitingTree accepts the tree of a TerraformRun's PipelineRun whose plan
// waits for approval: the plan task expanded with steps clone, init and
// plan completed, and the approval task listed and not started (the
// dashboard lists a custom task's CustomRun as a placeholder).
func awaitingTree(tree []tektonTask) error {
	plan := taskNamed(tree, "Plan (clone, init, plan)")
	if plan == nil {
		return fmt.Errorf("no task %q", "Plan (clone, init, plan)")
	}
	if plan.Succeeded != "True" {
		return fmt.Errorf("the plan task is %s/%s, not succeeded", plan.Succeeded, plan.Reason)
	}
	var names []string
	for _, s := range plan.Steps {
		names = append(names, s.Name)
		if s.Status != "terminated" || s.Reason != "Completed" {
			return fmt.Errorf("plan step %s is %s/%s, not completed", s.Name, s.Status, s.Reason)
		}
	}
	if got := strings.Join(names, " "); !strings.HasSuffix(got, "clone init plan") {
		return fmt.Errorf("the plan task's steps are %q, want … clone init plan", got)
	}
	gate := taskNamed(tree, "Approve the plan")
	if gate == nil {
		return fmt.Errorf("no task %q", "Approve the plan")
	}
	if gate.Succeeded != "" || gate.Reason != "" {
		return fmt.Errorf("the approval task is %s/%s, want not started (waiting)", gate.Succeeded, gate.Reason)
	}
	for _, later := range []string{"Apply the plan", "Export outputs"} {
		if tk := taskNamed(tree, later); tk == nil || tk.Succeeded != "" {
			return fmt.Errorf("task %q is %v, want listed and not started", later, tk)
		}
	}
	return nil
}

// pageText is the text of the element sel once it holds every one of want.
func pageText(ctx context.Context, u, sel string, timeout time.Duration, want ...string) (string, error) {
	if err := open(ctx, u); err != nil {
		return "", err
	}
	var text string
	for deadline := time.Now().Add(timeout); ; time.Sleep(time.Second) {
		text, _ = chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {}).innerText || ''`, sel)))
		missing := ""
		for _, w := range want {
			if !strings.Contains(text, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return text, nil
		}
		if time.Now().After(deadline) {
			return text, fmt.Errorf("%s shows no %q after %s: %q", u, missing, timeout, oneLine(text, 600))
		}
	}
}

// TestTektonDashboard: a TerraformRun on Tekton seen in the Tekton
// Dashboard's components: the PipelineRun's task tree with the plan task's
// steps and the approval task waiting, the plan step's log, the approval
// CustomRun pending with the plan's summary, digest and the approve
// command; after `kubectl tfrun approve`, the CustomRun succeeded and apply
// run. The same objects are read with kubectl as well. Then the tree check
// on a PipelineRun that lacks opr8r's gate, which it must refuse.
func TestTektonDashboard(t *testing.T) {
	t.Parallel()
	e := setup(t)
	view := tektonView(t)
	ctx := browser(t)

	t.Run("approve", func(t *testing.T) {
		name := "tk-dash"
		t.Cleanup(func() { _ = e.c.Delete(context.Background(), &infrav1.TerraformRun{ObjectMeta: objMeta(name)}) })
		e.sh(t, manifest(name, "tekton", "Hello Tekton"), e.kubectl, "apply", "-f", "-")
		run := e.waitFor(t, name, "the plan awaiting approval", 5*time.Minute, awaiting(""))
		pr := run.Status.Run.Child.Name
		digest := run.Status.Plan.Digest
		e.tektonObjectsAwaiting(t, name, pr, digest)

		// Every run of the TerraformRun, by its label, as a team filters them.
		list := fmt.Sprintf("%s/#/namespaces/%s/pipelineruns?labelSelector=%s", view, ns, url.QueryEscape("infra.opr8r.io/run="+name))
		// The filter shows as key:value, the dashboard's notation.
		if _, err := pageText(ctx, list, "#main-content", time.Minute, pr, "infra.opr8r.io/run:"+name); err != nil {
			screenshot(t, ctx, "tekton-pipelineruns-filtered")
			t.Fatal(err)
		}
		screenshot(t, ctx, "tekton-pipelineruns-filtered")

		tree, err := waitTree(ctx, pipelineRunURL(view, pr, nil), 2*time.Minute, awaitingTree)
		screenshot(t, ctx, "tekton-pipelinerun-awaiting-approval")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the page's task tree of %s: %v", pr, tree)

		// The plan step's log, read through the page's server from the pod.
		if _, err := pageText(ctx, pipelineRunURL(view, pr, url.Values{"pipelineTask": {"plan"}, "step": {"plan"}}), ".tkn--log", time.Minute,
			"Plan: 1 to add, 0 to change, 0 to destroy."); err != nil {
			screenshot(t, ctx, "tekton-plan-log")
			t.Fatal(err)
		}
		screenshot(t, ctx, "tekton-plan-log")

		// The run header shows the approval label (the task tree shows no
		// state of the approval custom task), and the label lists every run
		// that waits for someone.
		if _, err := pageText(ctx, pipelineRunURL(view, pr, nil), "#main-content", time.Minute,
			"infra.opr8r.io/approval: waiting"); err != nil {
			t.Error(err)
		}
		waiting := fmt.Sprintf("%s/#/pipelineruns?labelSelector=%s", view, url.QueryEscape(infrav1.ApprovalLabel+"="+infrav1.ApprovalLabelWaiting))
		if _, err := pageText(ctx, waiting, "#main-content", time.Minute, pr); err != nil {
			t.Error(err)
		}
		screenshot(t, ctx, "tekton-pipelineruns-waiting")
		// The approval task selected: the dashboard has nothing of the
		// CustomRun to show, only the task's name, Pending (dashboard#1970).
		if _, err := pageText(ctx, pipelineRunURL(view, pr, url.Values{"pipelineTask": {"approve"}}), "#main-content", time.Minute,
			"approve", "Pending"); err != nil {
			t.Error(err)
		}
		screenshot(t, ctx, "tekton-approve-task")

		// The CustomRun's own page: pending, with what to do.
		cr := fmt.Sprintf("%s/#/namespaces/%s/customruns/%s-approve", view, ns, pr)
		text, err := pageText(ctx, cr, ".tkn--resourcedetails", time.Minute,
			"AwaitingApproval - Plan +1 ~0 -0 ("+digest+") waits for approval",
			"kubectl tfrun approve "+name+" -n "+ns+" --plan "+digest,
			"Kind:", "Approval")
		screenshot(t, ctx, "tekton-customrun-awaiting-approval")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the approval CustomRun's page: %s", oneLine(text, 500))

		e.sh(t, "", e.tfrun, "approve", name, "-n", ns)
		if _, err := pageText(ctx, cr, ".tkn--resourcedetails", 2*time.Minute, "Approved - "); err != nil {
			screenshot(t, ctx, "tekton-customrun-approved")
			t.Fatal(err)
		}
		screenshot(t, ctx, "tekton-customrun-approved")

		if _, err := pageText(ctx, pipelineRunURL(view, pr, nil), "#main-content", time.Minute,
			"infra.opr8r.io/approval: approved"); err != nil {
			t.Error(err)
		}
		// The tree after the decision: apply started (or already done).
		tree, err = waitTree(ctx, pipelineRunURL(view, pr, nil), 3*time.Minute, func(tree []tektonTask) error {
			apply := taskNamed(tree, "Apply the plan")
			if apply == nil || (apply.Succeeded != "Unknown" && apply.Succeeded != "True") {
				return fmt.Errorf("the apply task is %v, want running or succeeded", apply)
			}
			return nil
		})
		screenshot(t, ctx, "tekton-pipelinerun-applying")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("after kubectl tfrun approve: %v", tree)

		e.waitFor(t, name, "the plan applied", 5*time.Minute, ready)
		e.tektonObjectsApplied(t, pr)
		// apply's pod ran apply, export-outputs and cleanup, each its own
		// step in the expanded task; the export task (a plan without
		// changes) and the finally fallback never ran.
		tree, err = waitTree(ctx, pipelineRunURL(view, pr, url.Values{"pipelineTask": {"apply"}}), 2*time.Minute, func(tree []tektonTask) error {
			for _, n := range []string{"Plan (clone, init, plan)", "Apply the plan"} {
				if tk := taskNamed(tree, n); tk == nil || tk.Succeeded != "True" {
					return fmt.Errorf("task %q is %v, want succeeded", n, tk)
				}
			}
			done := map[string]bool{}
			for _, st := range taskNamed(tree, "Apply the plan").Steps {
				done[st.Name] = st.Status == "terminated" && st.Reason == "Completed"
			}
			for _, st := range []string{"apply", "export-outputs", "cleanup"} {
				if !done[st] {
					return fmt.Errorf("step %s of the apply task did not complete: %v", st, taskNamed(tree, "Apply the plan"))
				}
			}
			for _, n := range []string{"Export outputs", "Cleanup"} {
				if tk := taskNamed(tree, n); tk == nil || tk.Succeeded != "" {
					return fmt.Errorf("task %q is %v, want shown and not run", n, tk)
				}
			}
			return nil
		})
		screenshot(t, ctx, "tekton-pipelinerun-applied")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("applied: %v", tree)
	})

	// The tree check on a PipelineRun without opr8r's shape (one plain task,
	// no steps clone/init/plan, no approval task) must fail: this proves
	// that the check above can fail.
	t.Run("check-can-fail", func(t *testing.T) {
		pr := "tk-misshaped"
		t.Cleanup(func() {
			_ = exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "delete", "pipelinerun", pr, "-n", ns, "--wait=false").Run()
		})
		e.sh(t, fmt.Sprintf(`apiVersion: tekton.dev/v1
kind: PipelineRun
metadata: {name: %s, namespace: %s}
spec:
  taskRunTemplate: {serviceAccountName: %s}
  timeouts: {pipeline: 10m}
  pipelineSpec:
    tasks:
    - name: plan
      displayName: "Plan (clone, init, plan)"
      timeout: 10m
      taskSpec:
        steps:
        - {name: all, image: localhost/opr8r/busybox:e2e, script: "echo planned"}
`, pr, ns, e.shapesAccount(t)), e.kubectl, "apply", "-f", "-")
		// First wait until the page shows the task succeeded, so that the
		// refusal below is about the shape, not about a page still loading.
		if _, err := waitTree(ctx, pipelineRunURL(view, pr, nil), 4*time.Minute, func(tree []tektonTask) error {
			if tk := taskNamed(tree, "Plan (clone, init, plan)"); tk == nil || tk.Succeeded != "True" {
				return fmt.Errorf("the plan task is %v, not succeeded yet", tk)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		_, err := waitTree(ctx, pipelineRunURL(view, pr, nil), 5*time.Second, awaitingTree)
		screenshot(t, ctx, "tekton-misshaped")
		if err == nil {
			t.Fatal("the tree check passed a PipelineRun without opr8r's steps and gate: it cannot tell a TerraformRun's PipelineRun from another")
		}
		if !strings.Contains(err.Error(), "want … clone init plan") {
			t.Fatalf("the tree check failed for another reason than the steps: %v", err)
		}
		t.Logf("as expected, the check refuses it: %v", err)
	})
}

type tektonCondition struct{ Type, Status, Reason, Message string }

// kubectlList reads kind's objects of PipelineRun pr with kubectl.
func (e *env) kubectlList(t *testing.T, v any, kind, pr string) {
	t.Helper()
	out, err := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "get", kind, "-n", ns, "-l", "tekton.dev/pipelineRun="+pr, "-o", "json").Output()
	if err != nil {
		t.Fatalf("kubectl get %s: %v", kind, err)
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("kubectl get %s: %v", kind, err)
	}
}

// approvalCondition is the one approval CustomRun's condition.
func (e *env) approvalCondition(t *testing.T, pr string) tektonCondition {
	t.Helper()
	var crs struct {
		Items []struct {
			Status struct{ Conditions []tektonCondition }
		}
	}
	e.kubectlList(t, &crs, "customruns", pr)
	if len(crs.Items) != 1 || len(crs.Items[0].Status.Conditions) == 0 {
		t.Fatalf("want one approval CustomRun of %s with a condition, got %+v", pr, crs.Items)
	}
	return crs.Items[0].Status.Conditions[0]
}

// tektonObjectsAwaiting checks, with kubectl, what the page reads: the plan
// TaskRun's steps clone, init and plan succeeded with their display names,
// and the approval CustomRun pending with the plan's summary, digest and
// the approve command.
func (e *env) tektonObjectsAwaiting(t *testing.T, name, pr, digest string) {
	t.Helper()
	var trs struct {
		Items []struct {
			Metadata struct{ Labels map[string]string }
			Spec     struct {
				TaskSpec struct {
					Steps []struct{ Name, DisplayName string }
				} `json:"taskSpec"`
			}
			Status struct {
				Steps []struct {
					Name       string
					Terminated *struct{ ExitCode int } `json:"terminated"`
				}
			}
		}
	}
	e.kubectlList(t, &trs, "taskruns", pr)
	found := false
	for _, tr := range trs.Items {
		if tr.Metadata.Labels["tekton.dev/pipelineTask"] != "plan" {
			continue
		}
		found = true
		var steps, display []string
		for _, s := range tr.Status.Steps {
			if s.Terminated == nil || s.Terminated.ExitCode != 0 {
				t.Errorf("plan TaskRun step %s did not succeed: %+v", s.Name, s.Terminated)
			}
			steps = append(steps, s.Name)
		}
		for _, s := range tr.Spec.TaskSpec.Steps {
			display = append(display, s.DisplayName)
		}
		if got := strings.Join(steps, " "); !strings.HasSuffix(got, "clone init plan") {
			t.Errorf("plan TaskRun steps = %q, want … clone init plan", got)
		}
		if got := strings.Join(display, "|"); !strings.HasSuffix(got, "clone the module|terraform init|terraform plan") {
			t.Errorf("plan TaskRun step display names = %q", got)
		}
	}
	if !found {
		t.Fatalf("no TaskRun of the plan task of %s", pr)
	}
	c := e.approvalCondition(t, pr)
	t.Logf("the approval CustomRun: %+v", c)
	if c.Status != "Unknown" || c.Reason != "AwaitingApproval" {
		t.Fatalf("the approval CustomRun is %s/%s, want Unknown/AwaitingApproval (pending)", c.Status, c.Reason)
	}
	for _, want := range []string{"Plan +1 ~0 -0 (" + digest + ") waits for approval",
		"kubectl tfrun approve " + name + " -n " + ns + " --plan " + digest} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("the approval CustomRun's message lacks %q: %q", want, c.Message)
		}
	}
}

// tektonObjectsApplied checks, with kubectl, that the approval CustomRun
// is Approved and the apply TaskRun succeeded.
func (e *env) tektonObjectsApplied(t *testing.T, pr string) {
	t.Helper()
	if c := e.approvalCondition(t, pr); c.Status != "True" || c.Reason != "Approved" {
		t.Errorf("after kubectl tfrun approve the approval CustomRun is %s/%s (%s), want True/Approved", c.Status, c.Reason, c.Message)
	}
	var trs struct {
		Items []struct {
			Metadata struct{ Labels map[string]string }
			Status   struct{ Conditions []tektonCondition }
		}
	}
	e.kubectlList(t, &trs, "taskruns", pr)
	for _, tr := range trs.Items {
		if tr.Metadata.Labels["tekton.dev/pipelineTask"] == "apply" {
			if len(tr.Status.Conditions) > 0 && tr.Status.Conditions[0].Status == "True" {
				return
			}
		}
	}
	t.Errorf("no succeeded apply TaskRun of %s", pr)
}
