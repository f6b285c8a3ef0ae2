package engines_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/opr8r/opr8r/pkg/names"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/engines/enginestest"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/inputs"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/testutil"
)

// clean keeps the runes of s that allowed accepts, capped at n; fallback if
// nothing is left. It turns fuzz input into values the CRD schema admits.
func clean(s string, allowed *regexp.Regexp, n int, fallback string) string {
	var b strings.Builder
	for _, r := range s {
		if allowed.MatchString(string(r)) {
			b.WriteRune(r)
		}
		if b.Len() >= n {
			break
		}
	}
	if b.Len() == 0 {
		return fallback
	}
	return b.String()
}

var (
	dnsRune  = regexp.MustCompile(`[a-z0-9]`)
	nameRune = regexp.MustCompile(`[A-Za-z0-9_]`)
	refRune  = regexp.MustCompile(`[A-Za-z0-9._/]`)
	keyRune  = regexp.MustCompile(`[A-Za-z0-9._-]`)
)

// specFrom builds an admission-valid TerraformRun from fuzz input: every
// field that the schema constrains gets a value the schema accepts.
func specFrom(name string, choice uint8, a, b, c string, jsonVal []byte, n uint8) *infrav1.TerraformRun {
	w := testutil.MakeRun(clean(name, dnsRune, 40, "r"), clean(c, dnsRune, 20, "ns"))
	r := w.Obj()
	switch choice % 3 {
	case 0:
		ref := strings.Trim(strings.ReplaceAll(clean(b, refRune, 60, "main"), "..", "."), "-")
		if ref == "" || strings.HasPrefix(ref, "-") {
			ref = "main"
		}
		path := strings.ReplaceAll(strings.Trim(clean(c, refRune, 60, ""), "/"), "..", ".")
		r.Spec.Source = infrav1.Source{Git: &infrav1.GitSource{URL: "https://example.com/" + clean(a, keyRune, 40, "repo") + ".git", Ref: ref, Path: path}}
		if choice&4 != 0 {
			r.Spec.Source.Git.CredentialsSecretRef = &infrav1.LocalObjectReference{Name: clean(b, dnsRune, 20, "creds")}
		}
	case 1:
		r.Spec.Source.Inline.Files = map[string]infrav1.FileContent{
			strings.TrimLeft(clean(a, keyRune, 60, "main.tf"), ".") + "x": infrav1.FileContent(b),
		}
	case 2:
		r.Spec.Source = infrav1.Source{ConfigMapRef: &infrav1.LocalObjectReference{Name: clean(a, dnsRune, 50, "module")}}
	}
	v := jsonVal
	if !json.Valid(v) {
		v, _ = json.Marshal(string(jsonVal))
	}
	for i := 0; i < int(n%4); i++ {
		r.Spec.Terraform.Vars = append(r.Spec.Terraform.Vars, infrav1.Variable{Name: fmt.Sprintf("v%d_%s", i, clean(a, nameRune, 20, "")), Value: apiextensionsv1.JSON{Raw: v}})
	}
	for i := 0; i < int(n%3); i++ {
		kind := "Secret"
		if i%2 == 1 {
			kind = "ConfigMap"
		}
		r.Spec.Terraform.VarsFrom = append(r.Spec.Terraform.VarsFrom, infrav1.VarsFromSource{Kind: kind, Name: fmt.Sprintf("vars-%d", i), Optional: choice&8 != 0})
	}
	if choice&16 != 0 {
		r.Spec.Terraform.Env = []infrav1.SecretEnvVar{{Name: "E_" + clean(b, nameRune, 20, "X"), SecretKeyRef: infrav1.SecretKeyRef{Name: "env", Key: clean(c, keyRune, 30, "k")}}}
		r.Spec.Terraform.Files = []infrav1.SecretFile{{SecretName: "files", MountPath: "/creds/" + clean(a, dnsRune, 20, "x"), EnvName: "F_PATH", Key: clean(b, keyRune, 20, "")}}
	}
	switch choice % 5 {
	case 1:
		r.Spec.Backend = &infrav1.BackendSpec{ConfigSecretRef: &infrav1.BackendConfigRef{Type: infrav1.BackendType("s" + clean(b, dnsRune, 10, "3")), Name: "backend"}}
	case 2:
		r.Spec.Backend = &infrav1.BackendSpec{Kubernetes: &infrav1.KubernetesBackend{SecretSuffix: clean(c, dnsRune, 30, "state")}}
	}
	if choice&32 != 0 {
		r.Spec.Approval.Mode = infrav1.ApprovalAuto
	}
	if choice&64 != 0 {
		r.Spec.Outputs.Rename = map[string]infrav1.SecretDataKey{"o_" + clean(a, nameRune, 20, ""): infrav1.SecretDataKey(clean(b, keyRune, 30, "k"))}
		r.Spec.Runner.NodeSelector = map[string]string{"pool": clean(c, dnsRune, 20, "x")}
		r.Spec.Runner.SecurityContext = &infrav1.RunnerSecurityContext{RunAsUser: ptr.To(int64(n) + 1)}
		q := resource.MustParse(fmt.Sprintf("%dGi", n%50+1))
		r.Spec.Runner.Workspace.Size = &q
		r.Spec.History.TTLAfterFinished = &metav1.Duration{Duration: 0}
	}
	if choice&128 != 0 {
		r.Spec.Terraform.Workspace = clean(b, dnsRune, 30, "ws")
	}
	return r
}

// depsFrom are resolved dependencies as the reconciler passes them, from
// fuzz input: one in the run's namespace (mounted), one in another (read
// through the API), with outputs named as a producer's Secret keys may be.
func depsFrom(ns string, choice uint8, a, b string) []engine.Dependency {
	if choice&2 == 0 {
		return nil
	}
	key := strings.TrimLeft(clean(b, keyRune, 60, "out"), ".")
	if key == "" {
		key = "out"
	}
	v := "v_" + clean(a, nameRune, 20, "x")
	return []engine.Dependency{
		{Name: "net", Namespace: ns, SecretName: "net-outputs", Vars: []engine.DependencyVar{{Output: key, Variable: "o" + key}, {Output: "id", Variable: v, Sensitive: choice&4 != 0}}},
		{Name: "db", Namespace: ns + "-db", SecretName: "db-outputs", Vars: []engine.DependencyVar{{Output: key, Variable: "d" + key, Sensitive: true}}},
	}
}

// hexChain is n bytes of hex that gzip cannot shrink below half: a chain of
// SHA-256 sums.
func hexChain(n int) string {
	var b strings.Builder
	sum := sha256.Sum256([]byte("opr8r"))
	for b.Len() < n {
		b.WriteString(hex.EncodeToString(sum[:]))
		sum = sha256.Sum256(sum[:])
	}
	return b.String()[:n]
}

// FuzzTranslate checks that every admission-valid spec translates, for every
// engine and run type, into an object the engine's own validator accepts,
// without panicking. make test runs the seed corpus; make fuzz runs it
// for longer.
func FuzzTranslate(f *testing.F) {
	f.Add("net", uint8(0), "modules", "v1.2.0", "stacks/vpc", []byte(`{"a":1}`), uint8(3))
	f.Add("inline", uint8(1), "main.tf", "resource \"x\" \"y\" {}", "ns", []byte(`"s"`), uint8(1))
	f.Add("cm", uint8(2), "module", "", "", []byte(`[1,2]`), uint8(2))
	f.Add("all", uint8(255), "a", "b", "c", []byte(`null`), uint8(255))
	f.Add("auto", uint8(0x35), "x", "y", "z", []byte(`not json`), uint8(7))
	f.Add("", uint8(0x96), "", "", "", []byte{}, uint8(0))
	// An inline file too large to travel in the child: its inputs ConfigMap.
	f.Add("large", uint8(1), "main.tf", hexChain(40<<10), "ns", []byte(`"s"`), uint8(1))
	f.Fuzz(func(t *testing.T, name string, choice uint8, a, b, c string, jsonVal []byte, n uint8) {
		run := specFrom(name, choice, a, b, c, jsonVal, n)
		deps := depsFrom(run.Namespace, choice, a, b)
		for _, kit := range enginestest.Kits() {
			e := kit.Engine
			eff := pipeline.Defaults(run, e.Name(), testutil.Config)
			eff.Spec.Engine = e.Name()
			hash := pipeline.SpecHash(eff)
			for _, typ := range []infrav1.RunType{infrav1.RunApply, infrav1.RunDestroy} {
				obj, err := e.Build(engine.Request{Run: eff, Type: typ, Name: names.ChildName(run.Name, typ, 1), Number: 1, SpecHash: hash, Config: testutil.Config, Dependencies: deps})
				if err != nil {
					t.Fatalf("%s %s: Build refused an admission-valid spec: %v\n%+v", e.Name(), typ, err, run.Spec)
				}
				if err := kit.Validate(obj); err != nil {
					t.Fatalf("%s %s: the engine's validation rejects the child: %v\n%+v", e.Name(), typ, err, run.Spec)
				}
				checkInputs(t, engine.Request{Run: eff, Type: typ, Name: obj.GetName(), SpecHash: hash, Config: testutil.Config})
			}
		}
	})
}

// checkInputs checks where a child's inputs travel. Small ones are in the
// clone step's InputsEnv, which decodes to the run's vars and inline files,
// with no ConfigMap and no volume naming one. Large ones are one ConfigMap
// with valid keys, and every volume mounting it selects keys it has, with
// vars.json among them.
func checkInputs(t *testing.T, req engine.Request) {
	t.Helper()
	cms, err := pipeline.InputObjects(req.Run, req.Name)
	if err != nil {
		t.Fatalf("input ConfigMaps: %v", err)
	}
	p, err := pipeline.Build(req)
	if err != nil {
		t.Fatal(err)
	}
	enc, embedded, err := pipeline.EmbeddedInputs(req.Run)
	if err != nil {
		t.Fatal(err)
	}
	if embedded {
		checkEmbedded(t, req, p, cms, enc)
		return
	}
	if len(enc) <= pipeline.MaxEmbeddedInputs {
		t.Fatalf("inputs of %d bytes encoded are not embedded", len(enc))
	}
	if len(cms) != 1 || cms[0].Name != names.InputsConfigMapName(req.Name) {
		t.Fatalf("want one input ConfigMap %s, got %d", names.InputsConfigMapName(req.Name), len(cms))
	}
	for k := range cms[0].Data {
		if errs := validation.IsConfigMapKey(k); len(errs) > 0 {
			t.Fatalf("input ConfigMap key %q: %v", k, errs)
		}
	}
	vars := false
	for _, v := range p.Volumes {
		src := v.ConfigMap
		if src == nil || src.Name != cms[0].Name {
			continue
		}
		if len(src.Items) == 0 {
			t.Fatalf("volume %s mounts every key of %s; it must select its own", v.Name, src.Name)
		}
		for _, it := range src.Items {
			if _, ok := cms[0].Data[it.Key]; !ok {
				t.Fatalf("volume %s selects key %q, which %s lacks", v.Name, it.Key, src.Name)
			}
			vars = vars || (it.Key == pipeline.VarsKey && pipeline.InputsDir+"/"+it.Path == pipeline.VarsFile)
		}
	}
	if !vars {
		t.Fatalf("no volume mounts %s at %s", pipeline.VarsKey, pipeline.VarsFile)
	}
}

// checkEmbedded checks a child whose inputs travel in its clone step.
func checkEmbedded(t *testing.T, req engine.Request, p *pipeline.Pipeline, cms []*corev1.ConfigMap, enc string) {
	t.Helper()
	if len(cms) != 0 {
		t.Fatalf("inputs of %d bytes encoded travel in the child, yet %d ConfigMaps are made", len(enc), len(cms))
	}
	for _, v := range p.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == names.InputsConfigMapName(req.Name) {
			t.Fatalf("volume %s mounts the inputs ConfigMap, which is not made", v.Name)
		}
	}
	clone, _ := p.StepNamed(names.StepClone)
	var got string
	for _, e := range clone.Env {
		if e.Name == pipeline.InputsEnv {
			got = e.Value
		}
	}
	if got != enc {
		t.Fatalf("the clone step's %s is not the run's encoded inputs", pipeline.InputsEnv)
	}
	in, err := inputs.Decode(got)
	if err != nil {
		t.Fatal(err)
	}
	wantVars := map[string]json.RawMessage{}
	for _, v := range req.Run.Spec.Terraform.Vars {
		wantVars[v.Name] = json.RawMessage(v.Value.Raw)
	}
	var gotVars map[string]json.RawMessage
	if err := json.Unmarshal([]byte(in.Vars), &gotVars); err != nil {
		t.Fatalf("vars.json: %v", err)
	}
	if len(gotVars) != len(wantVars) {
		t.Fatalf("vars.json has %d variables, want %d", len(gotVars), len(wantVars))
	}
	if src := req.Run.Spec.Source.Inline; src != nil && len(in.Files) != len(src.Files) {
		t.Fatalf("the inputs carry %d files, the inline source has %d", len(in.Files), len(src.Files))
	}
	plan, _ := p.StepNamed(names.StepPlan)
	if !slices.Contains(plan.Args, "--vars-file="+pipeline.EmbeddedVarsFile) || !slices.Contains(clone.Args, "--vars-out="+pipeline.EmbeddedVarsFile) {
		t.Fatalf("clone must write and plan read %s: clone %v, plan %v", pipeline.EmbeddedVarsFile, clone.Args, plan.Args)
	}
}
