package tenancy

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/yaml"
)

// root is the repository, from this package's directory.
const root = "../.."

// policyFiles are the admission policies opr8r installs: config/policy
// and each engine's manifests (the chart's are generated from them, and
// make verify keeps them so).
func policyFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, glob := range []string{"config/policy/*.yaml", "engines/*/manifests/policy.yaml"} {
		m, err := filepath.Glob(filepath.Join(root, glob))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 10 {
		t.Fatalf("found %d policy files: the test would prove nothing", len(files))
	}
	return files
}

// policies are the ValidatingAdmissionPolicies, MutatingAdmissionPolicies
// and bindings of the files, by file.
type policies struct {
	vaps     map[string][]admissionv1.ValidatingAdmissionPolicy
	maps     map[string][]admissionv1.MutatingAdmissionPolicy
	paramRef map[string][]string // file -> the ConfigMaps bindings name
}

func readPolicies(t *testing.T) policies {
	t.Helper()
	p := policies{vaps: map[string][]admissionv1.ValidatingAdmissionPolicy{}, maps: map[string][]admissionv1.MutatingAdmissionPolicy{}, paramRef: map[string][]string{}}
	for _, f := range policyFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			var raw map[string]any
			if err := d.Decode(&raw); err != nil {
				if err.Error() == "EOF" {
					break
				}
				t.Fatalf("%s: %v", f, err)
			}
			if raw == nil {
				continue
			}
			j, _ := yaml.Marshal(raw)
			switch raw["kind"] {
			case "ValidatingAdmissionPolicy":
				var v admissionv1.ValidatingAdmissionPolicy
				if err := yaml.UnmarshalStrict(j, &v); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				p.vaps[f] = append(p.vaps[f], v)
			case "MutatingAdmissionPolicy":
				var m admissionv1.MutatingAdmissionPolicy
				if err := yaml.UnmarshalStrict(j, &m); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				p.maps[f] = append(p.maps[f], m)
			case "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicyBinding":
				var bd struct {
					Spec struct {
						ParamRef *struct {
							Name string `json:"name"`
						} `json:"paramRef"`
					} `json:"spec"`
				}
				_ = yaml.Unmarshal(j, &bd)
				if bd.Spec.ParamRef != nil && bd.Spec.ParamRef.Name != "" {
					p.paramRef[f] = append(p.paramRef[f], bd.Spec.ParamRef.Name)
				}
			}
		}
	}
	return p
}

// expr is one CEL expression of a policy, and where it is.
type expr struct{ where, text string }

func (p policies) expressions() []expr {
	var out []expr
	for f, vs := range p.vaps {
		for _, v := range vs {
			at := func(s string) string {
				return fmt.Sprintf("%s: ValidatingAdmissionPolicy %s %s", filepath.Base(f), v.Name, s)
			}
			for _, x := range v.Spec.Variables {
				out = append(out, expr{at("variables." + x.Name), x.Expression})
			}
			for _, x := range v.Spec.MatchConditions {
				out = append(out, expr{at("matchConditions." + x.Name), x.Expression})
			}
			for i, x := range v.Spec.Validations {
				out = append(out, expr{at(fmt.Sprintf("validations[%d]", i)), x.Expression})
				if x.MessageExpression != "" {
					out = append(out, expr{at(fmt.Sprintf("validations[%d].messageExpression", i)), x.MessageExpression})
				}
			}
			for _, x := range v.Spec.AuditAnnotations {
				out = append(out, expr{at("auditAnnotations." + x.Key), x.ValueExpression})
			}
		}
	}
	for f, ms := range p.maps {
		for _, m := range ms {
			at := func(s string) string {
				return fmt.Sprintf("%s: MutatingAdmissionPolicy %s %s", filepath.Base(f), m.Name, s)
			}
			for _, x := range m.Spec.Variables {
				out = append(out, expr{at("variables." + x.Name), x.Expression})
			}
			for _, x := range m.Spec.MatchConditions {
				out = append(out, expr{at("matchConditions." + x.Name), x.Expression})
			}
			for i, x := range m.Spec.Mutations {
				if x.ApplyConfiguration != nil {
					out = append(out, expr{at(fmt.Sprintf("mutations[%d]", i)), x.ApplyConfiguration.Expression})
				}
				if x.JSONPatch != nil {
					out = append(out, expr{at(fmt.Sprintf("mutations[%d]", i)), x.JSONPatch.Expression})
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].where < out[j].where })
	return out
}

// TestEveryPolicyCompiles compiles every CEL expression of every policy
// with the API server's own compiler (k8s.io/apiserver, a test-only
// dependency) and environment, variables included, as the API server does
// when it loads the policy: a typo here would otherwise surface only as
// a policy that fails (closed, or open) in a live cluster.
func TestEveryPolicyCompiles(t *testing.T) {
	p := readPolicies(t)
	env := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
	n := 0
	for f, vs := range p.vaps {
		for _, v := range vs {
			opts := plugincel.OptionalVariableDeclarations{HasParams: v.Spec.ParamKind != nil, HasAuthorizer: true}
			msgOpts := plugincel.OptionalVariableDeclarations{HasParams: v.Spec.ParamKind != nil}
			c, err := plugincel.NewCompositedCompiler(env)
			if err != nil {
				t.Fatal(err)
			}
			fail := func(what string, r plugincel.CompilationResult) {
				n++
				if r.Error != nil {
					t.Errorf("%s: ValidatingAdmissionPolicy %s %s does not compile: %v", filepath.Base(f), v.Name, what, r.Error)
				}
			}
			for _, x := range v.Spec.Variables {
				fail("variables."+x.Name, c.CompileAndStoreVariable(&validating.Variable{Name: x.Name, Expression: x.Expression}, opts, environment.StoredExpressions))
			}
			for _, x := range v.Spec.MatchConditions {
				mc := admissionv1.MatchCondition(x)
				fail("matchConditions."+x.Name, c.CompileCELExpression((*matchconditions.MatchCondition)(&mc), opts, environment.StoredExpressions))
			}
			for i, x := range v.Spec.Validations {
				fail(fmt.Sprintf("validations[%d]", i), c.CompileCELExpression(&validating.ValidationCondition{Expression: x.Expression}, opts, environment.StoredExpressions))
				if x.MessageExpression != "" {
					fail(fmt.Sprintf("validations[%d].messageExpression", i), c.CompileCELExpression(&validating.MessageExpressionCondition{MessageExpression: x.MessageExpression}, msgOpts, environment.StoredExpressions))
				}
			}
			for _, x := range v.Spec.AuditAnnotations {
				fail("auditAnnotations."+x.Key, c.CompileCELExpression(&validating.AuditAnnotationCondition{Key: x.Key, ValueExpression: x.ValueExpression}, opts, environment.StoredExpressions))
			}
		}
	}
	for f, ms := range p.maps {
		for _, m := range ms {
			opts := plugincel.OptionalVariableDeclarations{HasParams: m.Spec.ParamKind != nil, HasAuthorizer: true}
			c, err := plugincel.NewCompositedCompiler(env)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range m.Spec.Variables {
				n++
				if r := c.CompileAndStoreVariable(&validating.Variable{Name: x.Name, Expression: x.Expression}, opts, environment.StoredExpressions); r.Error != nil {
					t.Errorf("%s: MutatingAdmissionPolicy %s variables.%s does not compile: %v", filepath.Base(f), m.Name, x.Name, r.Error)
				}
			}
			for _, x := range m.Spec.MatchConditions {
				n++
				mc := admissionv1.MatchCondition(x)
				if r := c.CompileCELExpression((*matchconditions.MatchCondition)(&mc), opts, environment.StoredExpressions); r.Error != nil {
					t.Errorf("%s: MutatingAdmissionPolicy %s matchConditions.%s does not compile: %v", filepath.Base(f), m.Name, x.Name, r.Error)
				}
			}
			po := opts
			po.HasPatchTypes = true
			for i, x := range m.Spec.Mutations {
				var ev plugincel.MutatingEvaluator
				switch {
				case x.ApplyConfiguration != nil:
					ev = c.CompileMutatingEvaluator(&patch.ApplyConfigurationCondition{Expression: x.ApplyConfiguration.Expression}, po, environment.StoredExpressions)
				case x.JSONPatch != nil:
					ev = c.CompileMutatingEvaluator(&patch.JSONPatchCondition{Expression: x.JSONPatch.Expression}, po, environment.StoredExpressions)
				default:
					continue
				}
				n++
				for _, err := range ev.CompilationErrors() {
					t.Errorf("%s: MutatingAdmissionPolicy %s mutations[%d] does not compile: %v", filepath.Base(f), m.Name, i, err)
				}
			}
		}
	}
	if n < 100 {
		t.Fatalf("compiled %d expressions: the test would prove nothing", n)
	}
	t.Logf("compiled %d CEL expressions of %d validating and %d mutating policies", n, count(p.vaps), count(p.maps))
}

func count[T any](m map[string][]T) int {
	n := 0
	for _, v := range m {
		n += len(v)
	}
	return n
}

var (
	// celString is a CEL string literal in single or double quotes.
	celString = regexp.MustCompile(`'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)"`)
	// labelKey is a label or annotation key (or a prefix of keys): a DNS
	// domain, a slash and a name.
	labelKey = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?\.[a-z]{2,}/[A-Za-z0-9._-]*$`)
	// dataKey is a ConfigMap data key a policy reads: params.data['k'],
	// params.?data.orValue({})[?'k'], 'k' in params.data.
	dataKey   = regexp.MustCompile(`data(?:\.orValue\(\{\}\))?\[\??'([A-Za-z0-9_.-]+)'\]`)
	dataInKey = regexp.MustCompile(`'([A-Za-z0-9_.-]+)' in params\.data`)
)

// TestContract: every name a policy reads (a label or annotation key or
// prefix, a ConfigMap it takes as a parameter, a data key of one) is a
// constant Go defines, so that the manager and the policies cannot drift
// apart: a rename in Go that a policy still reads the old way fails here.
func TestContract(t *testing.T) {
	p := readPolicies(t)
	consts := goConstants(t)
	// Names Kubernetes defines, which the policies read as Kubernetes
	// writes them.
	for _, k := range []string{
		corev1.ServiceAccountNameKey,
		string(corev1.SecretTypeServiceAccountToken),
		batchv1.ControllerUidLabel,
		serviceaccount.PodNameKey,
	} {
		consts[k] = "Kubernetes"
	}
	if len(consts) < 100 {
		t.Fatalf("found %d Go string constants: the test would prove nothing", len(consts))
	}
	read := map[string][]string{} // name -> where
	for _, e := range p.expressions() {
		for _, m := range celString.FindAllStringSubmatch(e.text, -1) {
			s := m[1] + m[2]
			if labelKey.MatchString(s) {
				read[s] = append(read[s], e.where)
			}
		}
		for _, re := range []*regexp.Regexp{dataKey, dataInKey} {
			for _, m := range re.FindAllStringSubmatch(e.text, -1) {
				read[m[1]] = append(read[m[1]], e.where)
			}
		}
	}
	for f, names := range p.paramRef {
		for _, n := range names {
			read[n] = append(read[n], filepath.Base(f)+": a binding's paramRef")
		}
	}
	if len(read) < 30 {
		t.Fatalf("found %d names the policies read: the test would prove nothing", len(read))
	}
	var missing []string
	for name, where := range read {
		if _, ok := consts[name]; !ok {
			missing = append(missing, fmt.Sprintf("%q (read by %s)", name, where[0]))
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("a policy reads %s, which no Go constant defines: define it (pkg/tenancy for the guard, identities and runner policy; api/v1alpha1 for labels and annotations; the engine's package for its own) and use it where Go writes it", m)
	}
	t.Logf("%d names the policies read, each a Go constant", len(read)-len(missing))
}

// goConstants are the values of the string constants of the module's
// packages (api, pkg, engines), by value, with where each is defined.
// Constants made of other constants ("a" + B, pkg.C) are evaluated.
func goConstants(t *testing.T) map[string]string {
	t.Helper()
	type key struct{ dir, name string }
	type def struct {
		dir     string
		imports map[string]string // alias -> dir in the module
		x       ast.Expr
	}
	defs := map[key]def{}
	const module = "github.com/opr8r/opr8r/"
	fset := token.NewFileSet()
	for _, top := range []string{"api", "pkg", "engines"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			dir := filepath.Dir(path)
			imports := map[string]string{}
			for _, im := range f.Imports {
				p, _ := strconv.Unquote(im.Path.Value)
				if !strings.HasPrefix(p, module) {
					continue
				}
				alias := filepath.Base(p)
				if im.Name != nil {
					alias = im.Name.Name
				}
				imports[alias] = filepath.Join(root, strings.TrimPrefix(p, module))
			}
			for _, decl := range f.Decls {
				g, ok := decl.(*ast.GenDecl)
				if !ok || g.Tok != token.CONST {
					continue
				}
				for _, spec := range g.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if i < len(vs.Values) {
							defs[key{dir, n.Name}] = def{dir, imports, vs.Values[i]}
						}
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var eval func(d def, depth int) (string, bool)
	eval = func(d def, depth int) (string, bool) {
		if depth > 10 {
			return "", false
		}
		switch x := d.x.(type) {
		case *ast.BasicLit:
			if x.Kind != token.STRING {
				return "", false
			}
			s, err := strconv.Unquote(x.Value)
			return s, err == nil
		case *ast.ParenExpr:
			return eval(def{d.dir, d.imports, x.X}, depth+1)
		case *ast.BinaryExpr:
			if x.Op != token.ADD {
				return "", false
			}
			a, ok1 := eval(def{d.dir, d.imports, x.X}, depth+1)
			b, ok2 := eval(def{d.dir, d.imports, x.Y}, depth+1)
			return a + b, ok1 && ok2
		case *ast.Ident:
			o, ok := defs[key{d.dir, x.Name}]
			if !ok {
				return "", false
			}
			return eval(o, depth+1)
		case *ast.SelectorExpr:
			pkg, ok := x.X.(*ast.Ident)
			if !ok || d.imports[pkg.Name] == "" {
				return "", false
			}
			o, ok := defs[key{d.imports[pkg.Name], x.Sel.Name}]
			if !ok {
				return "", false
			}
			return eval(o, depth+1)
		}
		return "", false
	}
	out := map[string]string{}
	for k, d := range defs {
		if s, ok := eval(d, 0); ok {
			out[s] = filepath.Join(k.dir, k.name)
		}
	}
	return out
}
