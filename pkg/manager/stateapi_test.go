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

// TestDependencySecretsAreTheResolvedOnes: a child reads, in another
// namespace, only the outputs of the dependencies the manager resolved
// (with the install's and the dependency's consent) when it started the
// child: a dependsOn added to the spec while a plan runs, or one never
// resolved, gives nothing (found by the security review: the grant once
// followed the live spec).
func TestDependencySecretsAreTheResolvedOnes(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := infrav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	victim := testutil.MakeRun("db", "finance").Obj()
	victim.UID = "victim"
	victim.Spec.Outputs.SecretName = "db-credentials"
	net := testutil.MakeRun("net", "infra").Obj()
	net.UID = "net"
	app := testutil.MakeRun("app", "team").Obj()
	app.Spec.DependsOn = []infrav1.Dependency{{Name: "db", Namespace: "finance"}, {Name: "net", Namespace: "infra"}}
	app.Status.Run = &infrav1.RunStatus{ID: "app-3", Dependencies: []infrav1.DependencyRun{{Name: "net", Namespace: "infra"}}}
	r := fake.NewClientBuilder().WithScheme(scheme).WithObjects(victim, net, app).Build()
	ctx := context.Background()
	deps := dependencySecrets(ctx, r, app, "app-3")
	if !slices.Equal(deps, []string{"infra/net-outputs"}) {
		t.Fatalf("app-3 reads %v, want only the resolved infra/net-outputs", deps)
	}
	g, _ := stateapi.GrantFor(app, "app-3", stateapi.RoleRunner, deps)
	if err := g.Decide(stateapi.Request{Verb: stateapi.Get, Resource: stateapi.Secrets, Namespace: "finance", Name: "db-credentials"}); err == nil {
		t.Fatal("a dependency in the spec but never resolved is readable")
	}
	if got := dependencySecrets(ctx, r, app, "app-2"); len(got) != 0 {
		t.Fatalf("an older child reads the current run's dependencies: %v", got)
	}
}
