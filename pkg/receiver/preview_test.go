package receiver

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

var testSeals = engine.Seals{Key: []byte("opr8r-tests-seal-key-of-32-bytes")}

const repoURL = "https://git.example.com/octocat/Hello-World.git"

func trackedRun(name string) *infrav1.TerraformRun {
	r := &infrav1.TerraformRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a", UID: types.UID(name + "-uid")}}
	r.Spec.Source.Git = &infrav1.GitSource{URL: repoURL, Ref: "main"}
	return r
}

// labelled is a TerraformRun with the preview labels, as anyone with edit
// may make one.
func labelled(name, of string, number string) *infrav1.TerraformRun {
	r := &infrav1.TerraformRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a",
		Labels: map[string]string{infrav1.PreviewOfLabel: of, infrav1.PullRequestLabel: number}}}
	r.Spec.Source.Git = &infrav1.GitSource{URL: repoURL, Ref: sha}
	return r
}

func testReceiver(api string, tweak func(*infrav1.ReceiverPreviews)) *infrav1.TerraformRunReceiver {
	p := &infrav1.ReceiverPreviews{APIURL: api, TokenSecretRef: &infrav1.LocalObjectReference{Name: "api"}}
	if tweak != nil {
		tweak(p)
	}
	return &infrav1.TerraformRunReceiver{ObjectMeta: metav1.ObjectMeta{Name: "forge", Namespace: "team-a"},
		Spec: infrav1.TerraformRunReceiverSpec{Type: infrav1.ReceiverGitea, Events: []infrav1.ReceiverEvent{infrav1.ReceiverPush, infrav1.ReceiverPullRequest},
			Previews: p}}
}

func testClient(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := infrav1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	tok := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: "team-a"}, Data: map[string][]byte{TokenKey: []byte("tok")}}
	return fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&infrav1.TerraformRun{}).WithObjects(append(objs, tok)...).Build()
}

// giteaRoutes are the answers of a Gitea that takes statuses and comments.
func giteaRoutes() map[string][]answerOf {
	repo := "/api/v1/repos/octocat/Hello-World"
	return map[string][]answerOf{
		"GET /api/v1/version":                     {{body: `{"version":"1.25.4"}`}},
		"GET /api/v1/user":                        {{body: `{"id":1,"login":"opr8r-bot"}`}},
		"POST " + repo + "/statuses/" + sha:       {{code: 201, body: `{"id":1}`}},
		"GET " + repo + "/issues/7/comments":      {{body: `[]`}},
		"POST " + repo + "/issues/7/comments":     {{code: 201, body: `{"id":99}`}},
		"PATCH " + repo + "/issues/comments/5":    {{body: `{"id":5}`}},
		"PATCH " + repo + "/issues/comments/99":   {{body: `{"id":99}`}},
		"GET /api/v1/repos/octocat/Hello-World/x": {{code: 404}},
	}
}

// statuses are the commit statuses a forge took: "state context
// description".
func statuses(t *testing.T, f *fakeForge) []string {
	var out []string
	for _, c := range f.took(true) {
		if c.Method == "POST" && strings.Contains(c.Path, "/statuses/") {
			var s struct{ State, Context, Description string }
			if err := json.Unmarshal([]byte(c.Body), &s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s.State+" "+s.Context+" "+s.Description)
		}
	}
	return out
}

func drain(rec *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, strings.Join(strings.Fields(e)[:2], " "))
		default:
			return out
		}
	}
}

func prEvent(api string) Event {
	return Event{Kind: PullRequest, Ref: "main", Commit: sha, Repos: []string{repoURL},
		PR: &PullRequestEvent{Number: 7, Action: PROpened, Base: "main", HeadSHA: sha, HeadRepos: []string{repoURL},
			Owner: "octocat", Repo: "Hello-World", API: api}}
}

func TestOpenPreviews(t *testing.T) {
	cases := map[string]struct {
		objs         []client.Object
		tweak        func(*infrav1.ReceiverPreviews)
		event        func(*Event)
		wantDone     []string
		wantEvents   []string
		wantStatuses []string
		wantSealed   []string
	}{
		"each tracked run previewed and sealed": {
			objs:         []client.Object{trackedRun("net"), trackedRun("dns")},
			wantDone:     []string{"dns-pr7", "net-pr7"},
			wantStatuses: []string{"pending opr8r/team-a/dns-pr7 opr8r is planning 6dcb09b5b578", "pending opr8r/team-a/net-pr7 opr8r is planning 6dcb09b5b578"},
			wantSealed:   []string{"dns-pr7", "net-pr7"},
		},
		"a foreign TerraformRun of a preview's name skipped, the other run previewed": {
			objs:         []client.Object{trackedRun("net"), trackedRun("dns"), labelled("net-pr7", "someone", "7")},
			wantDone:     []string{"dns-pr7"},
			wantEvents:   []string{"Warning PreviewSkipped"},
			wantStatuses: []string{"pending opr8r/team-a/dns-pr7 opr8r is planning 6dcb09b5b578"},
			wantSealed:   []string{"dns-pr7"},
		},
		"a pull request whose head repository the event does not name (a deleted fork: GitHub's head.repo null) is a fork": {
			objs:       []client.Object{trackedRun("net")},
			event:      func(e *Event) { e.PR.HeadRepos = nil },
			wantEvents: []string{"Normal PreviewSkipped"},
		},
		"over the cap per run": {
			objs:         []client.Object{trackedRun("net"), labelled("net-pr3", "net", "3"), labelled("net-pr4", "net", "4")},
			tweak:        func(p *infrav1.ReceiverPreviews) { p.MaxPerRun = 2 },
			wantEvents:   []string{"Warning PreviewCapped"},
			wantStatuses: []string{"error opr8r/team-a/net-pr7 not previewed: net has 2 previews, the receiver's cap (spec.previews.maxPerRun 2)"},
		},
		"over the cap per namespace": {
			objs:         []client.Object{trackedRun("net"), trackedRun("dns"), labelled("dns-pr3", "dns", "3")},
			tweak:        func(p *infrav1.ReceiverPreviews) { p.MaxPerNamespace = 1 },
			wantEvents:   []string{"Warning PreviewCapped", "Warning PreviewCapped"},
			wantStatuses: []string{"error opr8r/team-a/dns-pr7 not previewed: the namespace has 1 previews, the receiver's cap (spec.previews.maxPerNamespace 1)", "error opr8r/team-a/net-pr7 not previewed: the namespace has 1 previews, the receiver's cap (spec.previews.maxPerNamespace 1)"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			forge := newFakeForge(t, giteaRoutes())
			evil := newFakeForge(t, giteaRoutes())
			rcv := testReceiver(forge.srv.URL, tc.tweak)
			c := testClient(t, append(tc.objs, rcv)...)
			rec := events.NewFakeRecorder(10)
			s := &Server{API: c, Writer: c, Recorder: rec, HTTP: forge.srv.Client(), Seals: testSeals}
			ev := prEvent(evil.srv.URL)
			if tc.event != nil {
				tc.event(&ev)
			}
			done, err := s.previews(context.Background(), rcv, ev)
			if err != nil {
				t.Fatalf("previews: %v", err)
			}
			sort.Strings(done)
			if diff := cmp.Diff(tc.wantDone, done); diff != "" {
				t.Errorf("previews (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantEvents, drain(rec)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			got := statuses(t, forge)
			sort.Strings(got)
			if diff := cmp.Diff(tc.wantStatuses, got); diff != "" {
				t.Errorf("statuses (-want +got):\n%s", diff)
			}
			if n := len(evil.took(false)); n > 0 {
				t.Errorf("the address in the webhook got %d requests; want none (the receiver's apiURL only)", n)
			}
			var runs infrav1.TerraformRunList
			if err := c.List(context.Background(), &runs); err != nil {
				t.Fatal(err)
			}
			var sealed []string
			for i := range runs.Items {
				if IsManagersPreview(testSeals, &runs.Items[i]) {
					sealed = append(sealed, runs.Items[i].Name)
				}
			}
			if diff := cmp.Diff(tc.wantSealed, sealed); diff != "" {
				t.Errorf("sealed previews (-want +got):\n%s", diff)
			}
		})
	}
}

// sealedPreview is net's preview of pull request 7, made and sealed as
// the manager makes it, its plan done.
func sealedPreview(t *testing.T) *infrav1.TerraformRun {
	t.Helper()
	pv := Preview{Receiver: "forge", Type: "Gitea", Owner: "octocat", Repo: "Hello-World", Number: 7, Head: sha}
	p := newPreview(trackedRun("net"), "net-pr7", pv)
	mac, err := sealPreview(testSeals, p, pv)
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations[infrav1.PreviewSealAnnotation] = mac
	p.Status.Run = &infrav1.RunStatus{ID: "r1", Engine: "argo", Phase: infrav1.RunSucceeded, Commit: sha}
	p.Status.Plan = &infrav1.PlanStatus{Add: 1, Summary: "+1 ~0 -0", Digest: "sha256:abc"}
	return p
}

func TestPreviewReporter(t *testing.T) {
	withAnnotation := func(k, v string) func(*infrav1.TerraformRun) {
		return func(r *infrav1.TerraformRun) { r.Annotations[k] = v }
	}
	cases := map[string]struct {
		change       func(*infrav1.TerraformRun)
		wantStatuses []string
		wantComment  string // the request that wrote the comment
	}{
		"the manager's preview, reported to the receiver's address": {
			wantStatuses: []string{"success opr8r/team-a/net-pr7 plan +1 ~0 -0"},
			wantComment:  "POST /api/v1/repos/octocat/Hello-World/issues/7/comments",
		},
		"an API address in the preview's annotation is not used": {
			change:       withAnnotation(infrav1.PreviewAnnotation, `{"receiver":"forge","type":"Gitea","api":"{evil}","owner":"octocat","repo":"Hello-World","number":7,"head":"`+sha+`"}`),
			wantStatuses: []string{"success opr8r/team-a/net-pr7 plan +1 ~0 -0"},
			wantComment:  "POST /api/v1/repos/octocat/Hello-World/issues/7/comments",
		},
		"a comment id someone wrote is not edited": {
			change:       withAnnotation(infrav1.PreviewCommentAnnotation, "5"),
			wantStatuses: []string{"success opr8r/team-a/net-pr7 plan +1 ~0 -0"},
			wantComment:  "POST /api/v1/repos/octocat/Hello-World/issues/7/comments",
		},
		"a comment id the manager recorded is edited": {
			change:       withAnnotation(infrav1.PreviewCommentAnnotation, commentRef(testSeals, sealedPreview(t), 99)),
			wantStatuses: []string{"success opr8r/team-a/net-pr7 plan +1 ~0 -0"},
			wantComment:  "PATCH /api/v1/repos/octocat/Hello-World/issues/comments/99",
		},
		"a look-alike without a seal: nothing sent": {
			change: func(r *infrav1.TerraformRun) { delete(r.Annotations, infrav1.PreviewSealAnnotation) },
		},
		"its spec changed after sealing: nothing sent": {
			change: func(r *infrav1.TerraformRun) { r.Spec.Source.Git.URL = "https://evil.example.com/x.git" },
		},
		"its receiver changed after sealing: nothing sent": {
			change: withAnnotation(infrav1.PreviewAnnotation, `{"receiver":"other","type":"Gitea","owner":"octocat","repo":"Hello-World","number":7,"head":"`+sha+`"}`),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			forge := newFakeForge(t, giteaRoutes())
			evil := newFakeForge(t, giteaRoutes())
			p := sealedPreview(t)
			if tc.change != nil {
				tc.change(p)
				for k, v := range p.Annotations {
					p.Annotations[k] = strings.ReplaceAll(v, "{evil}", evil.srv.URL)
				}
			}
			other := testReceiver(evil.srv.URL, nil)
			other.Name = "other"
			c := testClient(t, p, testReceiver(forge.srv.URL, nil), other)
			r := &PreviewReporter{Client: c, API: c, HTTP: forge.srv.Client(), Seals: testSeals}
			if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "net-pr7"}}); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantStatuses, statuses(t, forge)); diff != "" {
				t.Errorf("statuses (-want +got):\n%s", diff)
			}
			var wrote []string
			for _, c := range forge.took(false) {
				if strings.Contains(c.Path, "comments") && c.Method != "GET" {
					wrote = append(wrote, c.Method+" "+c.Path)
				}
			}
			if tc.wantComment != "" && (len(wrote) != 1 || wrote[0] != tc.wantComment) {
				t.Errorf("comment written by %v, want %s", wrote, tc.wantComment)
			}
			if tc.wantComment == "" && len(forge.took(false)) > 0 {
				t.Errorf("the forge got %v, want nothing", forge.took(false))
			}
			if n := len(evil.took(false)); n > 0 {
				t.Errorf("another address got %d requests; want none", n)
			}
		})
	}
}

func TestIsManagersPreview(t *testing.T) {
	cases := map[string]struct {
		change func(*infrav1.TerraformRun)
		seals  engine.Seals
		want   bool
	}{
		"as sealed":                  {want: true},
		"another key":                {seals: engine.Seals{Key: []byte(strings.Repeat("x", 32))}},
		"no key":                     {seals: engine.Seals{Key: nil}},
		"another tracked run's UID":  {change: func(r *infrav1.TerraformRun) { r.OwnerReferences[0].UID = "other" }},
		"another tracked run":        {change: func(r *infrav1.TerraformRun) { r.Labels[infrav1.PreviewOfLabel] = "dns" }},
		"another pull request label": {change: func(r *infrav1.TerraformRun) { r.Labels[infrav1.PullRequestLabel] = "8" }},
		"another name":               {change: func(r *infrav1.TerraformRun) { r.Name = "net-pr8" }},
		"another namespace":          {change: func(r *infrav1.TerraformRun) { r.Namespace = "team-b" }},
		"another head in the spec":   {change: func(r *infrav1.TerraformRun) { r.Spec.Source.Git.Ref = strings.Repeat("a", 40) }},
		"a spec changed elsewhere":   {change: func(r *infrav1.TerraformRun) { r.Spec.PlanOnly = false }},
		"no seal":                    {change: func(r *infrav1.TerraformRun) { delete(r.Annotations, infrav1.PreviewSealAnnotation) }},
		"another repository": {change: func(r *infrav1.TerraformRun) {
			r.Annotations[infrav1.PreviewAnnotation] = strings.Replace(r.Annotations[infrav1.PreviewAnnotation], "Hello-World", "Other", 1)
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := sealedPreview(t)
			if tc.change != nil {
				tc.change(p)
			}
			seals := testSeals
			if tc.seals.Key != nil || name == "no key" {
				seals = tc.seals
			}
			if got := IsManagersPreview(seals, p); got != tc.want {
				t.Errorf("IsManagersPreview = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestMovePreview: a push moves the preview, and writes its whole spec
// again from the tracked run's, so the seal never covers what someone
// else wrote into it.
func TestMovePreview(t *testing.T) {
	forge := newFakeForge(t, giteaRoutes())
	rcv := testReceiver(forge.srv.URL, nil)
	tampered := sealedPreview(t)
	tampered.Spec.Source.Git.URL = "https://evil.example.com/x.git"
	tampered.Spec.Source.Git.Ref = strings.Repeat("b", 40)
	c := testClient(t, trackedRun("net"), tampered, rcv)
	s := &Server{API: c, Writer: c, Recorder: events.NewFakeRecorder(10), HTTP: forge.srv.Client(), Seals: testSeals}
	if _, err := s.previews(context.Background(), rcv, prEvent(forge.srv.URL)); err != nil {
		t.Fatal(err)
	}
	var got infrav1.TerraformRun
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "team-a", Name: "net-pr7"}, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(previewSpec(trackedRun("net"), sha), got.Spec); diff != "" {
		t.Errorf("moved preview's spec (-want +got):\n%s", diff)
	}
	if !IsManagersPreview(testSeals, &got) {
		t.Error("the moved preview is not sealed")
	}
}

// TestPreviewClosedWhenTrackedRunDeleted: a preview that goes because its
// tracked run was deleted tells the forge (its comment says so, its commit
// status is error) before its finalizer goes; a forge that fails is tried
// PreviewCloseAttempts times, then the finalizer goes anyway; a preview
// that goes while its tracked run stays (its pull request closed) is only
// let go.
func TestPreviewClosedWhenTrackedRunDeleted(t *testing.T) {
	down := giteaRoutes()
	down["POST /api/v1/repos/octocat/Hello-World/statuses/"+sha] = []answerOf{{code: 502}}
	cases := map[string]struct {
		routes       map[string][]answerOf
		trackedStays bool
		noReceiver   bool
		wantStatuses []string
		wantComment  string // the request that edited the comment
		wantText     string
		wantTries    int // reconciles until the finalizer is gone
	}{
		"the tracked run deleted: the comment and the status say so": {
			routes:       giteaRoutes(),
			wantStatuses: []string{"error opr8r/team-a/net-pr7 closed: the tracked run net was deleted"},
			wantComment:  "PATCH /api/v1/repos/octocat/Hello-World/issues/comments/99",
			wantText:     "The tracked TerraformRun ` net ` was deleted; its preview",
			wantTries:    1,
		},
		"the forge down: three tries, then let go": {
			routes:       down,
			wantStatuses: []string{"error opr8r/team-a/net-pr7 closed: the tracked run net was deleted", "error opr8r/team-a/net-pr7 closed: the tracked run net was deleted", "error opr8r/team-a/net-pr7 closed: the tracked run net was deleted"},
			wantTries:    3,
		},
		"the receiver gone (a namespace going): let go at once": {
			routes:     giteaRoutes(),
			noReceiver: true,
			wantTries:  1,
		},
		"the tracked run stays (the pull request closed): let go, nothing sent": {
			routes:       giteaRoutes(),
			trackedStays: true,
			wantTries:    1,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			forge := newFakeForge(t, tc.routes)
			p := sealedPreview(t)
			p.Annotations[infrav1.PreviewCommentAnnotation] = commentRef(testSeals, p, 99)
			objs := []client.Object{p}
			if !tc.noReceiver {
				objs = append(objs, testReceiver(forge.srv.URL, nil))
			}
			if tc.trackedStays {
				objs = append(objs, trackedRun("net"))
			}
			c := testClient(t, objs...)
			if err := c.Delete(context.Background(), p); err != nil {
				t.Fatal(err)
			}
			r := &PreviewReporter{Client: c, API: c, HTTP: forge.srv.Client(), Seals: testSeals}
			key := types.NamespacedName{Namespace: "team-a", Name: "net-pr7"}
			tries := 0
			for ; tries < 10; tries++ {
				if err := c.Get(context.Background(), key, &infrav1.TerraformRun{}); apierrors.IsNotFound(err) {
					break
				}
				if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
					t.Fatal(err)
				}
			}
			if tries != tc.wantTries {
				t.Errorf("the preview went after %d reconciles, want %d", tries, tc.wantTries)
			}
			if diff := cmp.Diff(tc.wantStatuses, statuses(t, forge)); diff != "" {
				t.Errorf("statuses (-want +got):\n%s", diff)
			}
			var req, text string
			for _, c := range forge.took(true) {
				if strings.Contains(c.Path, "/comments") && c.Method != "GET" {
					req, text = c.Method+" "+c.Path, c.Body
				}
			}
			if req != tc.wantComment || !strings.Contains(text, tc.wantText) {
				t.Errorf("comment written: %s %q, want %s with %q", req, text, tc.wantComment, tc.wantText)
			}
		})
	}
}

// TestPlanExtras: the pull-request comment says what else a plan does to
// what is managed, as terraform's own summary line does; an import-only
// plan read "0 to add, 0 to change, 0 to destroy".
func TestPlanExtras(t *testing.T) {
	for _, tc := range []struct {
		pl   infrav1.PlanStatus
		want string
	}{
		{infrav1.PlanStatus{Add: 1}, ""},
		{infrav1.PlanStatus{Import: 2}, ", 2 to import"},
		{infrav1.PlanStatus{Forget: 1, Move: 3, Actions: 1}, ", 1 to forget, 3 to move, 1 action(s) to invoke"},
	} {
		if got := planExtras(&tc.pl); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.pl, got, tc.want)
		}
	}
}
