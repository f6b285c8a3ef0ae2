package stateapi

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/testutil"
)

func TestGrantFor(t *testing.T) {
	run := testutil.MakeRun("app", "team").Obj()
	cases := []struct {
		name, account string
		preview       bool
		want          Role
		wantErr       bool
	}{
		{name: "runner", account: "run", want: RoleRunner},
		{name: "planner", account: "plan", want: RolePlanner},
		{name: "preview, whatever its account", account: "run", preview: true, want: RolePreview},
		{name: "another account", account: "opr8r-check", wantErr: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := GrantFor(run, "app-1", c.account, "plan", "run", c.preview, nil)
			if (err != nil) != c.wantErr {
				t.Fatalf("err = %v, want error %v", err, c.wantErr)
			}
			if err == nil && g.Role != c.want {
				t.Fatalf("role = %s, want %s", g.Role, c.want)
			}
			if err == nil && (g.State != "tfstate-default-app" || g.Lock != "lock-tfstate-default-app") {
				t.Fatalf("state %q lock %q", g.State, g.Lock)
			}
		})
	}
	if _, err := GrantFor(run, "other-1", "run", "plan", "run", false, nil); err == nil {
		t.Fatal("a child of another run was granted")
	}
	s3 := testutil.MakeRun("app", "team").Backend("s3", "cfg").Obj()
	if g, _ := GrantFor(s3, "app-1", "run", "plan", "run", false, nil); g.State != "" || g.Lock != "" {
		t.Fatalf("another backend's run got a kubernetes state %q", g.State)
	}
}

func TestDecide(t *testing.T) {
	run := testutil.MakeRun("app", "team").Obj()
	runner, _ := GrantFor(run, "app-1", "run", "plan", "run", false, []string{"infra/net-outputs"})
	planner, _ := GrantFor(run, "app-1", "plan", "plan", "run", false, nil)
	preview, _ := GrantFor(run, "app-1", "run", "plan", "run", true, nil)
	ownedByChild := &metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{Kind: "Workflow", Name: "app-1"}}}
	ownedByRun := &metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{Kind: "TerraformRun", Name: "app", UID: run.UID}}}
	ownedByOther := &metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{Kind: "Workflow", Name: "app-1-1"}}}
	labelledOther := &metav1.ObjectMeta{OwnerReferences: ownedByChild.OwnerReferences, Labels: map[string]string{infrav1.RunNameLabel: "db"}}
	kept := &metav1.ObjectMeta{Name: "app-3-errored-state", Labels: map[string]string{names.ErroredStateLabel: "app"}, OwnerReferences: ownedByRun.OwnerReferences}
	keptOfOther := &metav1.ObjectMeta{Name: "app-3-errored-state", Labels: map[string]string{names.ErroredStateLabel: "app"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "TerraformRun", Name: "app", UID: "another-uid"}}}
	reserved := &metav1.ObjectMeta{Labels: map[string]string{"infra.opr8r.io/errored-state-of": "app"}}
	cases := []struct {
		name  string
		g     Grant
		r     Request
		allow bool
	}{
		// The state and its lock.
		{"runner reads the state", runner, Request{Verb: Get, Resource: Secrets, Namespace: "team", Name: "tfstate-default-app"}, true},
		{"runner writes the state", runner, Request{Verb: Update, Resource: Secrets, Namespace: "team", Name: "tfstate-default-app", Object: &metav1.ObjectMeta{}}, true},
		{"runner deletes the state", runner, Request{Verb: Delete, Resource: Secrets, Namespace: "team", Name: "tfstate-default-app"}, true},
		{"state with opr8r's labels", runner, Request{Verb: Update, Resource: Secrets, Namespace: "team", Name: "tfstate-default-app", Object: reserved}, false},
		{"state given an owner", runner, Request{Verb: Create, Resource: Secrets, Namespace: "team", Name: "tfstate-default-app", Object: ownedByChild}, false},
		{"planner reads the state", planner, Request{Verb: Get, Resource: Secrets, Namespace: "team", Name: "tfstate-default-app"}, true},
		{"planner makes a new workspace's state", planner, Request{Verb: Create, Resource: Secrets, Namespace: "team", Name: "tfstate-default-app", Object: &metav1.ObjectMeta{}}, true},
		{"planner changes the state", planner, Request{Verb: Update, Resource: Secrets, Namespace: "team", Name: "tfstate-default-app", Object: &metav1.ObjectMeta{}}, false},
		{"planner deletes the state", planner, Request{Verb: Delete, Resource: Secrets, Namespace: "team", Name: "tfstate-default-app"}, false},
		{"planner takes the lock", planner, Request{Verb: Create, Resource: Leases, Namespace: "team", Name: "lock-tfstate-default-app"}, true},
		{"preview reads the state", preview, Request{Verb: Get, Resource: Secrets, Namespace: "team", Name: "tfstate-default-app"}, true},
		{"preview makes the state", preview, Request{Verb: Create, Resource: Secrets, Namespace: "team", Name: "tfstate-default-app", Object: &metav1.ObjectMeta{}}, false},
		{"preview writes the state", preview, Request{Verb: Update, Resource: Secrets, Namespace: "team", Name: "tfstate-default-app", Object: &metav1.ObjectMeta{}}, false},
		{"preview takes the lock", preview, Request{Verb: Create, Resource: Leases, Namespace: "team", Name: "lock-tfstate-default-app"}, false},
		{"preview reads the lock", preview, Request{Verb: Get, Resource: Leases, Namespace: "team", Name: "lock-tfstate-default-app"}, false},
		{"the state as terraform labels it", runner, Request{Verb: Get, Resource: Secrets, Namespace: "team", Name: "tfstate-default-app",
			Stored: &metav1.ObjectMeta{Labels: map[string]string{StateWorkspaceLabel: "default", StateSuffixLabel: "app"}}}, true},
		// Run "app" of workspace "default-x" and run "x-app"... any two
		// whose workspace and suffix join into one name.
		{"a state of the same name, another workspace's", runner, Request{Verb: Get, Resource: Secrets, Namespace: "team", Name: "tfstate-default-app",
			Stored: &metav1.ObjectMeta{Labels: map[string]string{StateWorkspaceLabel: "default-app", StateSuffixLabel: "x"}}}, false},
		{"a state of the same name, another suffix's", runner, Request{Verb: Update, Resource: Secrets, Namespace: "team", Name: "tfstate-default-app",
			Stored: &metav1.ObjectMeta{Labels: map[string]string{StateWorkspaceLabel: "default", StateSuffixLabel: "other"}}, Object: &metav1.ObjectMeta{}}, false},
		{"another run's state", runner, Request{Verb: Get, Resource: Secrets, Namespace: "team", Name: "tfstate-default-db", Stored: &metav1.ObjectMeta{Name: "tfstate-default-db"}}, false},
		{"another run's lock", runner, Request{Verb: Update, Resource: Leases, Namespace: "team", Name: "lock-tfstate-default-db"}, false},
		{"the lock listed", runner, Request{Verb: List, Resource: Leases, Namespace: "team", Name: "lock-tfstate-default-app"}, false},
		// The child's own Secrets.
		{"creates its plan Secret", runner, Request{Verb: Create, Resource: Secrets, Namespace: "team", Name: "app-1-plan", Object: ownedByChild}, true},
		{"creates a record owned by the run", preview, Request{Verb: Create, Resource: Secrets, Namespace: "team", Name: "app-1-rec-0123456789-0", Object: ownedByRun}, true},
		{"creates a Secret owned by nothing", runner, Request{Verb: Create, Resource: Secrets, Namespace: "team", Name: "app-1-plan", Object: &metav1.ObjectMeta{}}, false},
		{"creates a Secret owned by another child", runner, Request{Verb: Create, Resource: Secrets, Namespace: "team", Name: "app-1-1-plan", Object: ownedByOther}, false},
		{"creates a Secret labelled for another run", runner, Request{Verb: Create, Resource: Secrets, Namespace: "team", Name: "app-1-plan", Object: labelledOther}, false},
		{"creates a Secret not named after it", runner, Request{Verb: Create, Resource: Secrets, Namespace: "team", Name: "db-password", Object: ownedByChild}, false},
		{"reads its own Secret", runner, Request{Verb: Get, Resource: Secrets, Namespace: "team", Name: "app-1-plan", Stored: ownedByChild}, true},
		{"reads another child's Secret of the same prefix", runner, Request{Verb: Get, Resource: Secrets, Namespace: "team", Name: "app-1-1-plan", Stored: ownedByOther}, false},
		{"reads a tenant's Secret", runner, Request{Verb: Get, Resource: Secrets, Namespace: "team", Name: "db-password", Stored: &metav1.ObjectMeta{Name: "db-password"}}, false},
		{"a tenant's Secret renamed like the child's", runner, Request{Verb: Get, Resource: Secrets, Namespace: "team", Name: "app-1-x", Stored: &metav1.ObjectMeta{}}, false},
		{"updates its own Secret into another run's", runner, Request{Verb: Update, Resource: Secrets, Namespace: "team", Name: "app-1-plan", Stored: ownedByChild, Object: labelledOther}, false},
		{"get without the stored object", runner, Request{Verb: Get, Resource: Secrets, Namespace: "team", Name: "app-1-plan"}, false},
		// Kept states.
		{"runner reads a kept state", runner, Request{Verb: Get, Resource: Secrets, Namespace: "team", Name: kept.Name, Stored: kept}, true},
		{"runner deletes a kept state", runner, Request{Verb: Delete, Resource: Secrets, Namespace: "team", Name: kept.Name, Stored: kept}, true},
		{"runner rewrites a kept state", runner, Request{Verb: Update, Resource: Secrets, Namespace: "team", Name: kept.Name, Stored: kept, Object: kept}, false},
		{"planner reads a kept state", planner, Request{Verb: Get, Resource: Secrets, Namespace: "team", Name: kept.Name, Stored: kept}, false},
		{"a kept state another TerraformRun owns", runner, Request{Verb: Get, Resource: Secrets, Namespace: "team", Name: kept.Name, Stored: keptOfOther}, false},
		// Other namespaces.
		{"a dependency's outputs", runner, Request{Verb: Get, Resource: Secrets, Namespace: "infra", Name: "net-outputs"}, true},
		{"another Secret there", runner, Request{Verb: Get, Resource: Secrets, Namespace: "infra", Name: "net-credentials"}, false},
		{"a dependency's outputs written", runner, Request{Verb: Update, Resource: Secrets, Namespace: "infra", Name: "net-outputs"}, false},
		{"the same names elsewhere", runner, Request{Verb: Get, Resource: Secrets, Namespace: "other", Name: "tfstate-default-app"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.g.Decide(c.r)
			if (err == nil) != c.allow {
				t.Fatalf("Decide = %v, want allowed %v", err, c.allow)
			}
			if err != nil {
				if _, ok := err.(*Forbidden); !ok {
					t.Fatalf("error %T is not *Forbidden", err)
				}
			}
		})
	}
}

func TestParseStateAudience(t *testing.T) {
	aud := names.StateAudience("team", "app", "uid-1", "app-1")
	ns, run, uid, child, ok := names.ParseStateAudience(aud)
	if !ok || ns != "team" || run != "app" || uid != "uid-1" || child != "app-1" {
		t.Fatalf("parsed %q %q %q %q %v", ns, run, uid, child, ok)
	}
	for _, bad := range []string{"", "opr8r.io/state/", "opr8r.io/state/a/b/c", "opr8r.io/state/a/b/c/d/e", "https://kubernetes.default.svc", "opr8r.io/state/a//c/d"} {
		if _, _, _, _, ok := names.ParseStateAudience(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}
