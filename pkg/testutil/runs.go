// Package testutil builds TerraformRuns for tests (in the spirit of Kueue's
// pkg/util/testingjobs).
package testutil

import (
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

// Config is the engine configuration tests build with.
var Config = engine.Config{
	StepImage:            "ghcr.io/opr8r/opr8r:test",
	TerraformImage:       "docker.io/hashicorp/terraform:1.11",
	RunnerServiceAccount: "opr8r-runner",
	CheckServiceAccount:  "opr8r-check",
}

// SealKey is the seal key tests give the manager (manager.Options.SealKey).
var SealKey = []byte("opr8r-tests-seal-key-of-32-bytes")

// RunWrapper builds a TerraformRun.
type RunWrapper struct{ infrav1.TerraformRun }

// MakeRun returns a run with an inline module.
func MakeRun(name, ns string) *RunWrapper {
	return &RunWrapper{infrav1.TerraformRun{
		TypeMeta:   metav1.TypeMeta{APIVersion: infrav1.GroupVersion.String(), Kind: "TerraformRun"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("00000000-0000-0000-0000-000000000001")},
		Spec: infrav1.TerraformRunSpec{
			Source: infrav1.Source{Inline: &infrav1.InlineSource{Files: map[string]infrav1.FileContent{
				"main.tf": "resource \"terraform_data\" \"x\" {\n  input = var.name\n}\nvariable \"name\" { type = string }\noutput \"id\" { value = terraform_data.x.id }\n",
			}}},
		},
	}}
}

// Obj returns the run.
func (w *RunWrapper) Obj() *infrav1.TerraformRun { return &w.TerraformRun }

// Git sets a git source.
func (w *RunWrapper) Git(url, ref, path, secret string) *RunWrapper {
	w.Spec.Source = infrav1.Source{Git: &infrav1.GitSource{URL: url, Ref: ref, Path: path}}
	if secret != "" {
		w.Spec.Source.Git.CredentialsSecretRef = &infrav1.LocalObjectReference{Name: secret}
	}
	return w
}

// OCI sets an OCI artifact source: a tag or a digest (a value starting
// with sha256:), a path in the artifact and a credentials Secret.
func (w *RunWrapper) OCI(url, ref, path, secret string) *RunWrapper {
	o := &infrav1.OCISource{URL: url, Path: path}
	if len(ref) > 7 && ref[:7] == "sha256:" {
		o.Digest = ref
	} else {
		o.Tag = ref
	}
	if secret != "" {
		o.CredentialsSecretRef = &infrav1.LocalObjectReference{Name: secret}
	}
	w.Spec.Source = infrav1.Source{OCI: o}
	return w
}

// Var sets a variable to a JSON value.
func (w *RunWrapper) Var(name, json string) *RunWrapper {
	for i, v := range w.Spec.Terraform.Vars {
		if v.Name == name {
			w.Spec.Terraform.Vars[i].Value = apiextensionsv1.JSON{Raw: []byte(json)}
			return w
		}
	}
	w.Spec.Terraform.Vars = append(w.Spec.Terraform.Vars, infrav1.Variable{Name: name, Value: apiextensionsv1.JSON{Raw: []byte(json)}})
	return w
}

// VarsFrom adds a varsFrom entry.
func (w *RunWrapper) VarsFrom(kind, name string) *RunWrapper {
	w.Spec.Terraform.VarsFrom = append(w.Spec.Terraform.VarsFrom, infrav1.VarsFromSource{Kind: kind, Name: name})
	return w
}

// EnvFromSecret adds an env var read from a Secret key.
func (w *RunWrapper) EnvFromSecret(env, secret, key string) *RunWrapper {
	w.Spec.Terraform.Env = append(w.Spec.Terraform.Env, infrav1.SecretEnvVar{Name: env, SecretKeyRef: infrav1.SecretKeyRef{Name: secret, Key: key}})
	return w
}

// Auto sets approval mode Auto.
func (w *RunWrapper) Auto() *RunWrapper {
	w.Spec.Approval.Mode = infrav1.ApprovalAuto
	return w
}

// Annotate sets an annotation.
func (w *RunWrapper) Annotate(key, value string) *RunWrapper {
	if w.Annotations == nil {
		w.Annotations = map[string]string{}
	}
	w.Annotations[key] = value
	return w
}

// Backend sets a backend configured from a Secret.
func (w *RunWrapper) Backend(typ, secret string) *RunWrapper {
	w.Spec.Backend = &infrav1.BackendSpec{ConfigSecretRef: &infrav1.BackendConfigRef{Type: infrav1.BackendType(typ), Name: secret}}
	return w
}

// Engine sets spec.engine.
func (w *RunWrapper) Engine(e infrav1.EngineName) *RunWrapper {
	w.Spec.Engine = e
	return w
}

// Retain sets deletionPolicy Retain.
func (w *RunWrapper) Retain() *RunWrapper {
	w.Spec.DeletionPolicy = infrav1.DeletionRetain
	return w
}

// Outputs sets the outputs mapping.
func (w *RunWrapper) Outputs(rename map[string]string, exclude ...string) *RunWrapper {
	w.Spec.Outputs.Rename = map[string]infrav1.SecretDataKey{}
	for k, v := range rename {
		w.Spec.Outputs.Rename[k] = infrav1.SecretDataKey(v)
	}
	w.Spec.Outputs.Exclude = exclude
	return w
}

// Check adds one of spec.checks; a non-empty configMap is mounted at /opr8r/check.
func (w *RunWrapper) Check(name, image, configMap string, command ...string) *RunWrapper {
	c := infrav1.Check{Name: name, Image: image, Command: command}
	if configMap != "" {
		c.ConfigMapRef = &infrav1.LocalObjectReference{Name: configMap}
	}
	w.Spec.Checks = append(w.Spec.Checks, c)
	return w
}

// GoldenCase is a spec whose engine objects are kept as golden files.
type GoldenCase struct {
	Run  *RunWrapper
	Type infrav1.RunType
}

// GoldenConfig is the install configuration the golden case of that name
// is built with: Config; for provider-cache an install with a provider
// mirror and a shared plugin cache; for step-binary-image one that mounts
// the step image instead of installing opr8r-step (--step-binary).
func GoldenConfig(name string) engine.Config {
	c := Config
	switch name {
	case "provider-cache":
		c.Providers = engine.Providers{Mirror: "https://providers.opr8r-system.svc/", MirrorCA: GoldenMirrorCA, CacheClaim: "opr8r-provider-cache"}
	case "step-binary-image":
		c.StepBinaryFromImage = true
	}
	return c
}

// GoldenMirrorCA stands for the PEM of a mirror's CA (it is carried, not
// parsed, by the translators).
const GoldenMirrorCA = "-----BEGIN CERTIFICATE-----\nMIIB...\n-----END CERTIFICATE-----\n"

// GoldenDeps are the resolved dependencies the reconciler would pass when
// building the golden case of that name.
func GoldenDeps(name string) []engine.Dependency {
	if name == "dependencies" {
		return stackDeps
	}
	return nil
}

// DependsOn adds a dependency; with outputs, all of them or the listed
// ones ("output" or "output=variable").
func (w *RunWrapper) DependsOn(ns, name string, all bool, outputs ...string) *RunWrapper {
	d := infrav1.Dependency{Name: name, Namespace: ns}
	if all {
		d.Outputs = &infrav1.DependencyOutputs{All: true}
	} else if len(outputs) > 0 {
		d.Outputs = &infrav1.DependencyOutputs{}
		for _, o := range outputs {
			out, as, _ := strings.Cut(o, "=")
			d.Outputs.Select = append(d.Outputs.Select, infrav1.OutputVariable{Output: out, As: as})
		}
	}
	w.Spec.DependsOn = append(w.Spec.DependsOn, d)
	return w
}

// stackDeps are the resolved dependencies of the "dependencies" golden
// case: one in the run's namespace (mounted), one in another (read by the
// step through the API), with a sensitive output.
var stackDeps = []engine.Dependency{
	{Name: "network", Namespace: "team-a", SecretName: "network-outputs", Vars: []engine.DependencyVar{
		{Output: "vpc_id", Variable: "vpc_id"}, {Output: "subnet_ids", Variable: "subnets"}}},
	{Name: "db", Namespace: "platform", SecretName: "db-outputs", Vars: []engine.DependencyVar{
		{Output: "password", Variable: "db_password", Sensitive: true}}},
}

// GoldenCases are the specs every engine's golden files are built from.
func GoldenCases() map[string]GoldenCase {
	return map[string]GoldenCase{
		"inline":           {MakeRun("net", "team-a").Var("name", `"demo"`).Var("tags", `{"env":"dev","n":3}`), infrav1.RunApply},
		"git-token":        {MakeRun("vpc", "team-a").Git("https://git.example.com/infra/modules.git", "v1.2.0", "stacks/vpc", "git-creds"), infrav1.RunApply},
		"vars-from-secret": {MakeRun("db", "team-a").VarsFrom("Secret", "db-vars").VarsFrom("ConfigMap", "db-defaults").EnvFromSecret("AWS_ACCESS_KEY_ID", "aws", "access-key").EnvFromSecret("AWS_SECRET_ACCESS_KEY", "aws", "secret-key"), infrav1.RunApply},
		"auto-approval":    {MakeRun("dns", "team-a").Auto(), infrav1.RunApply},
		"custom-backend":   {MakeRun("bucket", "team-a").Backend("s3", "s3-backend"), infrav1.RunApply},
		"destroy":          {MakeRun("net", "team-a").Var("name", `"demo"`), infrav1.RunDestroy},
		"drift-check":      {MakeRun("vpc", "team-a").Git("https://git.example.com/infra/modules.git", "main", "stacks/vpc", "git-creds").VarsFrom("Secret", "db-vars"), infrav1.RunDrift},
		"oci":              {MakeRun("vpc", "team-a").OCI("oci://registry.example.com/infra/modules/vpc", "1.2.0", "stacks/vpc", "registry-creds"), infrav1.RunApply},
		"plan-only":        {MakeRun("preview", "team-a").Git("https://git.example.com/infra/modules.git", "pr-42", "", ""), infrav1.RunPlan},
		"checks": {MakeRun("net", "team-a").EnvFromSecret("AWS_ACCESS_KEY_ID", "aws", "access-key").
			Check("policy", "docker.io/openpolicyagent/conftest:v0.62.0", "opa-policies", "conftest", "test", "--policy", "/opr8r/check", "/workspace/plan/plan.json").
			Check("cost", "registry.example.com/infracost:1", "", "sh", "-c", "infracost breakdown --path $OPR8R_PLAN_JSON"), infrav1.RunApply},
		"checks-auto": {MakeRun("dns", "team-a").Auto().Check("policy", "docker.io/openpolicyagent/conftest:v0.62.0", "opa-policies", "conftest", "test", "--policy", "/opr8r/check", "/workspace/plan/plan.json"), infrav1.RunApply},
		"dependencies": {MakeRun("app", "team-a").DependsOn("", "network", false, "vpc_id", "subnet_ids=subnets").DependsOn("platform", "db", false, "password=db_password").DependsOn("", "dns", false),
			infrav1.RunApply},
		"provider-cache": {MakeRun("cached", "team-a").Auto(), infrav1.RunApply},
		"step-binary-image": {MakeRun("fast", "team-a").Auto().Check("policy", "docker.io/openpolicyagent/conftest:v0.62.0", "opa-policies", "conftest", "test", "--policy", "/opr8r/check", "/workspace/plan/plan.json"),
			infrav1.RunApply},
		"checks-plan-only": {MakeRun("preview", "team-a").Check("policy", "docker.io/openpolicyagent/conftest:v0.62.0", "opa-policies", "conftest", "test", "--policy", "/opr8r/check", "/workspace/plan/plan.json"), infrav1.RunPlan},
	}
}
