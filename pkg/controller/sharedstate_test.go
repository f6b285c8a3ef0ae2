package controller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/testutil"
)

// TestSharedState: a run whose state Secret an older run holds stalls,
// through the same suffix or a workspace and suffix that join into the
// same name; a sealed preview shares its tracked run's; a look-alike does
// not.
func TestSharedState(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	mk := func(name, ws, suffix string, age int) infrav1.TerraformRun {
		r := testutil.MakeRun(name, "team").Obj()
		r.UID = types.UID("uid-" + name)
		r.CreationTimestamp = metav1.NewTime(t0.Add(time.Duration(age) * time.Minute))
		r.Spec.Terraform.Workspace = ws
		if suffix != "" {
			r.Spec.Backend = &infrav1.BackendSpec{Kubernetes: &infrav1.KubernetesBackend{SecretSuffix: suffix}}
		}
		return *r
	}
	preview := func(r infrav1.TerraformRun, of string) infrav1.TerraformRun {
		r.Labels = map[string]string{infrav1.PreviewOfLabel: of}
		return r
	}
	sealed := func(r *infrav1.TerraformRun) bool { return r.Annotations["sealed"] == "yes" }
	seal := func(r infrav1.TerraformRun) infrav1.TerraformRun {
		r.Annotations = map[string]string{"sealed": "yes"}
		return r
	}
	app := mk("app", "prod-eu", "", 0)
	for _, c := range []struct {
		name   string
		run    infrav1.TerraformRun
		others []infrav1.TerraformRun
		want   string
	}{
		{"alone", app, nil, ""},
		{"the same suffix, explicit", mk("copy", "prod-eu", "app", 5), []infrav1.TerraformRun{app}, "app"},
		{"workspace and suffix joined: prod + eu-app = prod-eu + app", mk("eu-app", "prod", "", 5), []infrav1.TerraformRun{app}, "app"},
		{"the older keeps it", app, []infrav1.TerraformRun{mk("eu-app", "prod", "", 5)}, ""},
		{"db-1-state's default is db-1's", mk("db-1-state", "default", "", 5), []infrav1.TerraformRun{mk("db-1", "default", "", 0)}, "db-1"},
		{"another workspace", mk("copy", "staging", "app", 5), []infrav1.TerraformRun{app}, ""},
		{"a sealed preview of it", seal(preview(mk("app-pr3", "prod-eu", "app", 5), "app")), []infrav1.TerraformRun{app}, ""},
		{"a look-alike preview", preview(mk("app-pr3", "prod-eu", "app", 5), "app"), []infrav1.TerraformRun{app}, "app"},
		{"two sealed previews of one run", seal(preview(mk("app-pr4", "prod-eu", "app", 9), "app")), []infrav1.TerraformRun{app, seal(preview(mk("app-pr3", "prod-eu", "app", 5), "app"))}, ""},
	} {
		if got := sharedState(&c.run, c.others, sealed); got != c.want {
			t.Errorf("%s: shared with %q, want %q", c.name, got, c.want)
		}
	}
}
