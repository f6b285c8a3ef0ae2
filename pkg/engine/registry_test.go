package engine_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

// named is the smallest engine: a name.
type named string

func (n named) Name() infrav1.EngineName                  { return infrav1.EngineName(n) }
func (named) ChildGVK() schema.GroupVersionKind           { return schema.GroupVersionKind{} }
func (named) NewChild() client.Object                     { return nil }
func (named) NewChildList() client.ObjectList             { return nil }
func (named) Build(engine.Request) (client.Object, error) { return nil, nil }
func (named) Observe(client.Object, []client.Object, time.Time) (engine.Progress, error) {
	return engine.Progress{}, nil
}

func TestRegistry(t *testing.T) {
	tests := map[string]struct {
		engines     []engine.Engine
		wantErr     bool
		wantNames   []infrav1.EngineName
		wantDefault infrav1.EngineName
	}{
		"names are sorted, the default is the first given": {
			engines:     []engine.Engine{named("tekton"), named("argo"), named("job")},
			wantNames:   []infrav1.EngineName{"argo", "job", "tekton"},
			wantDefault: "tekton",
		},
		"one engine": {engines: []engine.Engine{named("job")}, wantNames: []infrav1.EngineName{"job"}, wantDefault: "job"},
		"none":       {},
		"a name twice is refused": {
			engines: []engine.Engine{named("argo"), named("argo")},
			wantErr: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r, err := engine.NewRegistry(tc.engines...)
			if (err != nil) != tc.wantErr {
				t.Fatalf("NewRegistry: err %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.wantNames, r.Names(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Names (-want +got):\n%s", diff)
			}
			for i, e := range r.All() {
				if e.Name() != tc.wantNames[i] {
					t.Errorf("All()[%d] is %s, want %s", i, e.Name(), tc.wantNames[i])
				}
			}
			for _, e := range tc.engines {
				if got, ok := r.Get(e.Name()); !ok || got.Name() != e.Name() {
					t.Errorf("Get(%s) = %v, %v", e.Name(), got, ok)
				}
			}
			if _, ok := r.Get("nope"); ok {
				t.Error("Get of an unregistered engine found one")
			}
			if got := engine.DefaultEngine(tc.engines); got != tc.wantDefault {
				t.Errorf("DefaultEngine = %q, want %q", got, tc.wantDefault)
			}
		})
	}
}
