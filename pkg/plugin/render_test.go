package plugin_test

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opr8r/opr8r/pkg/engine"

	"sigs.k8s.io/yaml"

	"github.com/opr8r/opr8r/engines"
	"github.com/opr8r/opr8r/engines/enginestest"
	"github.com/opr8r/opr8r/pkg/plugin"
)

// TestRenderEveryExample renders each example for every engine with the
// manager's translators and checks the result with the engine's validator.
func TestRenderEveryExample(t *testing.T) {
	examples, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(examples) < 7 {
		t.Fatalf("want at least 7 examples, found %d (%v)", len(examples), err)
	}
	for _, ex := range examples {
		for _, kit := range enginestest.Kits() {
			eng := string(kit.Engine.Name())
			for _, typ := range []string{"apply", "destroy"} {
				t.Run(filepath.Base(ex)+"/"+eng+"/"+typ, func(t *testing.T) {
					var out bytes.Buffer
					ro := plugin.RenderOptions{File: ex, Engine: eng, Type: typ, DefaultEngine: "argo", All: true, Engines: engines.All()}
					ro.Config.StepImage, ro.Config.TerraformImage, ro.Config.RunnerServiceAccount = engine.DefaultStepImage, engine.DefaultTerraformImage, engine.DefaultRunnerServiceAccount
					if err := plugin.Render(&out, ro); err != nil {
						t.Fatalf("render: %v", err)
					}
					docs := strings.Split(out.String(), "\n---\n")
					// The examples' inputs are small: they travel in the child.
					if len(docs) != 1 {
						t.Fatalf("want the child alone, got %d documents", len(docs))
					}
					child := kit.Engine.NewChild()
					if err := yaml.UnmarshalStrict([]byte(docs[0]), child); err != nil {
						t.Fatal(err)
					}
					if err := kit.Validate(child); err != nil {
						t.Fatalf("%s rejects the rendered child: %v", eng, err)
					}
				})
			}
		}
	}
}

func TestRenderErrors(t *testing.T) {
	cases := map[string]struct {
		ro   plugin.RenderOptions
		want string
	}{
		"unknown engine": {plugin.RenderOptions{File: "../../examples/inline.yaml", Engine: "jenkins", Type: "apply"}, `unknown engine "jenkins"`},
		"bad type":       {plugin.RenderOptions{File: "../../examples/inline.yaml", Type: "plan"}, "--type must be apply or destroy"},
		"missing file":   {plugin.RenderOptions{File: "nope.yaml", Type: "apply"}, "no such file"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tc.ro.Config.StepImage, tc.ro.Config.TerraformImage = "s", "t"
			tc.ro.Engines = engines.All()
			err := plugin.Render(&bytes.Buffer{}, tc.ro)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestRenderResolvesSelectedDependencyOutputs: offline, the outputs a run
// selects from its dependencies are shown as the manager would pass them,
// with what render had to assume said in comments.
func TestRenderResolvesSelectedDependencyOutputs(t *testing.T) {
	var out bytes.Buffer
	ro := plugin.RenderOptions{File: "../../examples/stack-app.yaml", Engine: "argo", Type: "apply", DefaultEngine: "argo", Engines: engines.All()}
	ro.Config.StepImage, ro.Config.TerraformImage, ro.Config.RunnerServiceAccount = engine.DefaultStepImage, engine.DefaultTerraformImage, engine.DefaultRunnerServiceAccount
	if err := plugin.Render(&out, ro); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# dependsOn network: its outputs are assumed to be in Secret network-outputs and not sensitive",
		"--dependency-var=db_secret,run=network,output=db_password,file=/opr8r/deps/0/db_secret",
		"secretName: network-outputs",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("render lacks %q:\n%s", want, out.String())
		}
	}
}

// TestRenderOCISource: kubectl tfrun render shows an OCI source's clone
// step, fetching the tag with the registry Secret mounted, not passed.
func TestRenderOCISource(t *testing.T) {
	var out bytes.Buffer
	ro := plugin.RenderOptions{File: "../../examples/oci.yaml", Engine: "argo", Type: "apply", DefaultEngine: "argo", Engines: engines.All()}
	ro.Config.StepImage, ro.Config.TerraformImage, ro.Config.RunnerServiceAccount = engine.DefaultStepImage, engine.DefaultTerraformImage, engine.DefaultRunnerServiceAccount
	if err := plugin.Render(&out, ro); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--source=oci", "--url=oci://ghcr.io/example-org/modules/network", "--ref=v1.4.0", "--credentials-dir=/opr8r/secrets/oci", "secretName: ghcr-creds"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the rendered Workflow lacks %q", want)
		}
	}
}
