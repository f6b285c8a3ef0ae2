package plugin

import (
	"fmt"
	"io"
	"os"

	"github.com/opr8r/opr8r/pkg/names"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/pipeline"
)

// RenderOptions configure `kubectl tfrun render`.
type RenderOptions struct {
	File          string
	Engine        string
	Type          string
	DefaultEngine string
	Config        engine.Config
	All           bool
	// Engines are the engines the manager has (engines.All, from cmd/).
	Engines []engine.Engine
}

func newRenderCommand(o *Options) *cobra.Command {
	ro := &RenderOptions{Engines: o.Engines}
	cmd := &cobra.Command{
		Use:   "render -f run.yaml",
		Short: "Print the Workflow or PipelineRun the operator would create, offline",
		Long: "render uses the manager's own translators, like helm template: no cluster is needed.\n" +
			"The run's namespace and name come from the file; its uid is left empty.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return Render(o.Out, *ro) },
	}
	cmd.Flags().StringVarP(&ro.File, "filename", "f", "", "The TerraformRun manifest (- for stdin)")
	cmd.Flags().StringVar(&ro.Engine, "engine", "", "Render for this engine (default: spec.engine, else --default-engine)")
	cmd.Flags().StringVar(&ro.Type, "type", string(infrav1.RunApply), "Run type: apply or destroy")
	cmd.Flags().StringVar(&ro.DefaultEngine, "default-engine", string(engine.DefaultEngine(o.Engines)), "The manager's --default-engine")
	cmd.Flags().StringVar(&ro.Config.StepImage, "step-image", engine.DefaultStepImage, "The manager's --step-image")
	cmd.Flags().StringVar(&ro.Config.TerraformImage, "terraform-image", engine.DefaultTerraformImage, "The manager's --terraform-image")
	cmd.Flags().StringVar(&ro.Config.RunnerServiceAccount, "runner-service-account", engine.DefaultRunnerServiceAccount, "The manager's --runner-service-account")
	cmd.Flags().BoolVar(&ro.All, "all", false, "Also print the ConfigMaps the operator creates next to the child")
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}

// Render prints the child (and, with All, its input ConfigMaps) of the run
// in the file, built by the same code the manager runs.
func Render(out io.Writer, ro RenderOptions) error {
	run, err := readRun(ro.File)
	if err != nil {
		return err
	}
	if ro.Engine != "" {
		run.Spec.Engine = infrav1.EngineName(ro.Engine)
	}
	eff := pipeline.Defaults(run, infrav1.EngineName(ro.DefaultEngine), ro.Config)
	typ := infrav1.RunType(ro.Type)
	if typ != infrav1.RunApply && typ != infrav1.RunDestroy {
		return fmt.Errorf("--type must be apply or destroy, not %q", ro.Type)
	}
	reg, err := engine.NewRegistry(ro.Engines...)
	if err != nil {
		return err
	}
	e, ok := reg.Get(eff.Spec.Engine)
	if !ok {
		return fmt.Errorf("unknown engine %q (known: %v)", eff.Spec.Engine, reg.Names())
	}
	name := names.ChildName(run.Name, typ, 1)
	deps, notes := offlineDependencies(eff)
	child, err := e.Build(engine.Request{Run: eff, Type: typ, Name: name, Number: 1, SpecHash: pipeline.SpecHash(eff), Config: ro.Config, Dependencies: deps})
	if err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(out, "# "+n)
	}
	docs := []any{child}
	if ro.All {
		cms, err := pipeline.InputObjects(eff, name)
		if err != nil {
			return err
		}
		for _, cm := range cms {
			cm.APIVersion, cm.Kind = "v1", "ConfigMap"
			docs = append(docs, cm)
		}
	}
	return writeYAML(out, docs)
}

// readRun reads the TerraformRun of a file (- for stdin), in namespace
// default unless it names one.
func readRun(file string) (*infrav1.TerraformRun, error) {
	var b []byte
	var err error
	if file == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, err
	}
	run := &infrav1.TerraformRun{}
	if err := yaml.UnmarshalStrict(b, run); err != nil {
		return nil, fmt.Errorf("%s is not a TerraformRun: %w", file, err)
	}
	if run.Kind != "TerraformRun" {
		return nil, fmt.Errorf("%s has kind %q, want TerraformRun", file, run.Kind)
	}
	if run.Namespace == "" {
		run.Namespace = "default"
	}
	return run, nil
}

// writeYAML writes objects as a YAML stream.
func writeYAML(out io.Writer, docs []any) error {
	for i, d := range docs {
		y, err := yaml.Marshal(d)
		if err != nil {
			return err
		}
		if i > 0 {
			fmt.Fprintln(out, "---")
		}
		if _, err := out.Write(y); err != nil {
			return err
		}
	}
	return nil
}

// offlineDependencies resolves spec.dependsOn as far as the file allows:
// the selected outputs, assumed to be in the dependency's default outputs
// Secret (<name>-outputs) and not sensitive. The manager reads both from
// the dependency's status; notes say what was assumed or left out.
func offlineDependencies(run *infrav1.TerraformRun) ([]engine.Dependency, []string) {
	var deps []engine.Dependency
	var notes []string
	for _, d := range run.Spec.DependsOn {
		if d.Outputs == nil {
			continue
		}
		ns := d.Namespace
		if ns == "" {
			ns = run.Namespace
		}
		if d.Outputs.All {
			notes = append(notes, fmt.Sprintf("dependsOn %s: outputs.all cannot be resolved offline (the manager takes the outputs listed in its status); no variables from it are shown", d.Name))
			continue
		}
		dep := engine.Dependency{Name: d.Name, Namespace: ns, SecretName: d.Name + "-outputs"}
		for _, o := range d.Outputs.Select {
			v := o.As
			if v == "" {
				v = o.Output
			}
			dep.Vars = append(dep.Vars, engine.DependencyVar{Output: o.Output, Variable: v})
		}
		notes = append(notes, fmt.Sprintf("dependsOn %s: its outputs are assumed to be in Secret %s and not sensitive (the manager reads both from its status)", d.Name, dep.SecretName))
		deps = append(deps, dep)
	}
	return deps, notes
}
