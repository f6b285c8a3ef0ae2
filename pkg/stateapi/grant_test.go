package stateapi

import (
	"net/http"
	"net/http/httptest"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/records"
	"github.com/opr8r/opr8r/pkg/testutil"
)

func TestGrantFor(t *testing.T) {
	run := testutil.MakeRun("app", "team").Obj()
	for _, c := range []struct {
		child   string
		role    Role
		wantErr bool
	}{
		{child: "app-1", role: RoleRunner},
		{child: "app-plan-3", role: RolePlanner},
		{child: "app-drift-12", role: RolePreview},
		{child: "app-1", role: "admin", wantErr: true},
		{child: "other-1", role: RoleRunner, wantErr: true},
		// A run named app-evil, or app-plan, is not a child of app.
		{child: "app-evil", role: RoleRunner, wantErr: true},
		{child: "app-evil-1", role: RoleRunner, wantErr: true},
		{child: "app-1-1", role: RoleRunner, wantErr: true},
		{child: "app-", role: RoleRunner, wantErr: true},
	} {
		g, err := GrantFor(run, c.child, c.role, nil)
		if (err != nil) != c.wantErr {
			t.Errorf("%s as %s: err = %v, want error %v", c.child, c.role, err, c.wantErr)
			continue
		}
		if err == nil && (g.Role != c.role || g.State != "tfstate-default-app" || g.Lock != "lock-tfstate-default-app") {
			t.Errorf("%s: role %s state %q lock %q", c.child, g.Role, g.State, g.Lock)
		}
	}
	s3 := testutil.MakeRun("app", "team").Backend("s3", "cfg").Obj()
	if g, _ := GrantFor(s3, "app-1", RoleRunner, nil); g.State != "" || g.Lock != "" {
		t.Fatalf("another backend's run got a kubernetes state %q", g.State)
	}
}

func TestDecide(t *testing.T) {
	run := testutil.MakeRun("app", "team").Obj()
	runner, _ := GrantFor(run, "app-1", RoleRunner, []string{"infra/net-outputs"})
	planner, _ := GrantFor(run, "app-1", RolePlanner, nil)
	preview, _ := GrantFor(run, "app-1", RolePreview, nil)
	ownedByChild := &metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{Kind: "Workflow", Name: "app-1"}}}
	ownedByRun := &metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{Kind: "TerraformRun", Name: "app", UID: run.UID}}}
	ownedByOther := &metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{Kind: "Workflow", Name: "app-1-1"}}}
	labelledOther := &metav1.ObjectMeta{OwnerReferences: ownedByChild.OwnerReferences, Labels: map[string]string{infrav1.RunNameLabel: "db"}}
	keptLabels := map[string]string{records.KindLabel: string(records.KindErroredState), infrav1.RunNameLabel: "app", records.RunIDLabel: "app-3"}
	kept := &metav1.ObjectMeta{Name: "app-3-rec-0123456789-0", Labels: keptLabels, OwnerReferences: ownedByRun.OwnerReferences}
	keptOfOther := &metav1.ObjectMeta{Name: "app-3-rec-0123456789-0", Labels: keptLabels,
		OwnerReferences: []metav1.OwnerReference{{Kind: "TerraformRun", Name: "app", UID: "another-uid"}}}
	reserved := &metav1.ObjectMeta{Labels: map[string]string{"infra.opr8r.io/run": "app"}}
	keepNew := &metav1.ObjectMeta{OwnerReferences: ownedByRun.OwnerReferences, Labels: map[string]string{records.KindLabel: string(records.KindErroredState), infrav1.RunNameLabel: "app", records.RunIDLabel: "app-1"}}
	tokenAnno := &metav1.ObjectMeta{OwnerReferences: ownedByRun.OwnerReferences, Annotations: map[string]string{"kubernetes.io/service-account.name": "deployer"}}
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
		// What a Secret may be.
		{"a service-account token Secret", runner, Request{Verb: Create, Resource: Secrets, Namespace: "team", Name: "app-1-tok", Object: ownedByRun, Type: "kubernetes.io/service-account-token"}, false},
		{"a token Secret's annotation on an Opaque one", preview, Request{Verb: Create, Resource: Secrets, Namespace: "team", Name: "app-1-tok", Object: tokenAnno, Type: "Opaque"}, false},
		{"a dockerconfig Secret", runner, Request{Verb: Update, Resource: Secrets, Namespace: "team", Name: "app-1-plan", Stored: ownedByChild, Object: ownedByChild, Type: "kubernetes.io/dockerconfigjson"}, false},
		{"the state as another type", runner, Request{Verb: Update, Resource: Secrets, Namespace: "team", Name: "tfstate-default-app", Object: &metav1.ObjectMeta{}, Type: "kubernetes.io/service-account-token"}, false},
		{"a record of another child", runner, Request{Verb: Create, Resource: Secrets, Namespace: "team", Name: "app-1-rec-0-0", Object: &metav1.ObjectMeta{OwnerReferences: ownedByRun.OwnerReferences, Labels: map[string]string{records.RunIDLabel: "app-2"}}}, false},
		// Kept states are the runner's to write.
		{"runner keeps a state", runner, Request{Verb: Create, Resource: Secrets, Namespace: "team", Name: "app-1-rec-0123456789-0", Object: keepNew}, true},
		{"planner plants a kept state", planner, Request{Verb: Create, Resource: Secrets, Namespace: "team", Name: "app-1-rec-0123456789-0", Object: keepNew}, false},
		{"preview plants a kept state", preview, Request{Verb: Create, Resource: Secrets, Namespace: "team", Name: "app-1-rec-0123456789-0", Object: keepNew}, false},
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
	aud := names.StateAudience("team", "app", "uid-1", "app-1", "planner")
	p, ok := names.ParseStateAudience(aud)
	if !ok || p != (names.StateAudienceParts{Namespace: "team", Run: "app", UID: "uid-1", Child: "app-1", Role: "planner"}) {
		t.Fatalf("parsed %+v %v", p, ok)
	}
	for _, bad := range []string{"", "opr8r.io/state/", "opr8r.io/state/a/b/c/d", "opr8r.io/state/a/b/c/d/e/f", "https://kubernetes.default.svc", "opr8r.io/state/a//c/d/e"} {
		if _, ok := names.ParseStateAudience(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

// A name or namespace that is not a DNS name is refused before it is
// decided: joined unescaped into the API server's path, "x?k=v" (sent as
// x%3Fk=v) would be decided as one object and reach the API server as x
// with a query of the caller's choosing.
func TestParseRefusesNamesThatAreNotNames(t *testing.T) {
	for path, ok := range map[string]bool{
		"/api/v1/namespaces/e2e/secrets/tfstate-default-web":                  true,
		"/apis/coordination.k8s.io/v1/namespaces/e2e/leases/lock-tfstate-web": true,
		"/api/v1/namespaces/e2e/secrets/x%3FdryRun=All":                       false,
		"/api/v1/namespaces/e2e/secrets/x%23frag":                             false,
		"/api/v1/namespaces/e2e%3Fx=1/secrets":                                false,
		"/api/v1/namespaces/E2E/secrets":                                      false,
	} {
		_, err := parse(httptest.NewRequest(http.MethodGet, path, nil))
		if (err == nil) != ok {
			t.Errorf("%s: %v, want allowed %v", path, err, ok)
		}
	}
}
