package pipeline_test

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/testutil"
)

// TestProviders: an install's provider mirror reaches every terraform
// step, and its shared cache claim is mounted as terraform's plugin cache
// in the init step only: the plan, apply and later steps run module code,
// which could change a package in the cache between another run's
// verification and execution of it, and they use the run's own copies
// (TestCachedPackageSwappedAfterVerification). Neither reaches the clone
// step or a check (which runs an image the TerraformRun chose). Without a
// claim, each run keeps its cache in its workspace.
func TestProviders(t *testing.T) {
	run := testutil.MakeRun("net", "team-a").Check("policy", "conftest:1", "", "conftest", "test").Obj()
	cfg := testutil.Config
	cfg.Providers = engine.Providers{Mirror: "https://mirror.example/providers/", MirrorCA: "PEM", CacheClaim: "opr8r-provider-cache"}
	for _, shared := range []bool{true, false} {
		c := cfg
		if !shared {
			c = testutil.Config
		}
		p, err := pipeline.Build(engine.Request{Run: pipeline.Defaults(run, infrav1.EngineArgo, c), Config: c, Type: infrav1.RunApply, Name: "net-1"})
		if err != nil {
			t.Fatal(err)
		}
		claim := slices.ContainsFunc(p.Volumes, func(v corev1.Volume) bool {
			return v.Name == pipeline.ProviderCacheVolume && v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "opr8r-provider-cache"
		})
		if claim != shared {
			t.Errorf("shared=%v: the claim's volume is there: %v", shared, claim)
		}
		steps := 0
		for _, s := range p.Steps {
			terraform := slices.Contains([]string{names.StepInit, names.StepPlan, names.StepApply, names.StepExport, names.StepCleanup}, s.Name)
			env := map[string][]string{}
			for _, e := range s.Env {
				env[e.Name] = append(env[e.Name], e.Value)
			}
			mounted := slices.ContainsFunc(s.VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.Name == pipeline.ProviderCacheVolume && m.MountPath == pipeline.SharedPluginCacheDir
			})
			if mounted != (shared && s.Name == names.StepInit) {
				t.Errorf("shared=%v: step %s mounts the shared cache: %v", shared, s.Name, mounted)
			}
			if shared && !terraform && len(env[names.EnvProviderMirror]) > 0 {
				t.Errorf("step %s is given the mirror", s.Name)
			}
			if !terraform {
				continue
			}
			steps++
			wantCache := pipeline.PluginCacheDir
			if shared && s.Name == names.StepInit {
				wantCache = pipeline.SharedPluginCacheDir
			}
			if !slices.Equal(env["TF_PLUGIN_CACHE_DIR"], []string{wantCache}) {
				t.Errorf("shared=%v: step %s TF_PLUGIN_CACHE_DIR %v, want only %s", shared, s.Name, env["TF_PLUGIN_CACHE_DIR"], wantCache)
			}
			if shared && (!slices.Equal(env[names.EnvProviderMirror], []string{cfg.Providers.Mirror}) || !slices.Equal(env[names.EnvProviderMirrorCA], []string{"PEM"})) {
				t.Errorf("step %s's environment lacks the mirror or its CA: %v", s.Name, env)
			}
			if !shared && len(env[names.EnvProviderMirror]) > 0 {
				t.Errorf("step %s has provider settings no install gave: %v", s.Name, env)
			}
			// A cached package is taken only when the module's lock file
			// lists its checksum: nothing may tell terraform otherwise.
			if len(env["TF_PLUGIN_CACHE_MAY_BREAK_DEPENDENCY_LOCK_FILE"]) > 0 {
				t.Errorf("shared=%v: step %s lets terraform take a cached package no lock file lists: %v", shared, s.Name, env)
			}
		}
		if steps < 4 {
			t.Fatalf("only %d terraform steps in %v", steps, p.Steps)
		}
	}
}
