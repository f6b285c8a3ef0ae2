package manager

import (
	"context"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/stateapi"
	"github.com/opr8r/opr8r/pkg/testutil"
)

// TestDependencySecretsNeedConsent: a child reads, in another namespace,
// only the outputs of a dependency the install allows and that consents
// (spec.allowDependentsFrom), checked at each call (found by the security
// review: the grant once took any dependsOn); a destroy's child reads
// them too (make e2e: TestStacks' cross-namespace dependent could not
// destroy when the grant took only the started run's recorded ones).
func TestDependencySecretsNeedConsent(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := infrav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	victim := testutil.MakeRun("db", "finance").Obj() // consents to nobody
	victim.Spec.Outputs.SecretName = "db-credentials"
	net := testutil.MakeRun("net", "infra").Obj()
	net.Spec.AllowDependentsFrom = []string{"team"}
	app := testutil.MakeRun("app", "team").Obj()
	app.Spec.DependsOn = []infrav1.Dependency{{Name: "db", Namespace: "finance"}, {Name: "net", Namespace: "infra"}, {Name: "gone", Namespace: "infra"}}
	r := fake.NewClientBuilder().WithScheme(scheme).WithObjects(victim, net, app).Build()
	ctx := context.Background()
	deps := dependencySecrets(ctx, r, true, app)
	if !slices.Equal(deps, []string{"infra/net-outputs"}) {
		t.Fatalf("app reads %v, want only infra/net-outputs (the one that consents)", deps)
	}
	g, _ := stateapi.GrantFor(app, "app-destroy-3", stateapi.RoleRunner, deps)
	if err := g.Decide(stateapi.Request{Verb: stateapi.Get, Resource: stateapi.Secrets, Namespace: "finance", Name: "db-credentials"}); err == nil {
		t.Fatal("a dependency that does not consent is readable")
	}
	if got := dependencySecrets(ctx, r, false, app); len(got) != 0 {
		t.Fatalf("an install without cross-namespace dependencies reads %v", got)
	}
}
