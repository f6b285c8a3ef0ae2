// Package stateapi is the manager's state API: the few Kubernetes API
// calls the steps of a run make on Secrets and Leases (terraform's
// kubernetes backend, the readable plan, the outputs, the records in
// clear, the kept states), served for that run's own objects only.
//
// The service accounts that run module code (the planner, the runner, a
// preview's) hold no right on the namespace's Secrets and Leases: a
// module's code, which can read the pod's own token, can read no Secret
// the run does not own and write no state but its own. The steps reach
// the state API with a projected token whose audience names their
// TerraformRun and child (names.StateAudience); the manager checks the
// token with the API server (TokenReview), decides with Grant.Decide,
// and makes the call itself.
package stateapi

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/records"
)

// The manager makes the calls it allows on the namespaces' Secrets and
// state Leases.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update;delete
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create

// Role is what a step's identity may do with its run's state.
type Role string

const (
	// RoleRunner reads and writes the state and takes its lock: the
	// steps after the gate, and every step of a run without a plan
	// service account of its own.
	RoleRunner Role = "runner"
	// RolePlanner reads the state, takes its lock and may create a new
	// workspace's state, never change or delete one: the steps before the
	// gate of a run with spec.runner.planServiceAccountName.
	RolePlanner Role = "planner"
	// RolePreview reads the state and takes no lock (previews plan with
	// -lock=false): a pull request's code never writes the tracked run's
	// state nor holds its lock.
	RolePreview Role = "preview"
)

// Grant is what the steps of one child may do through the state API.
type Grant struct {
	Namespace, Run string
	RunUID         types.UID
	// Child is the run's engine object: the Secrets its steps write begin
	// with its name and are owned by it (or by the TerraformRun).
	Child string
	Role  Role
	// State and Lock are the run's state Secret and Lease in the
	// kubernetes backend; empty with another backend. Workspace and
	// Suffix are what terraform labels the state with: two runs whose
	// workspace and suffix join into the same name (x and y-z, x-y and z)
	// never share a state.
	State, Lock       string
	Workspace, Suffix string
	// Dependencies are the outputs Secrets ("namespace/name") of the
	// run's dependencies in other namespaces, which the plan step reads.
	Dependencies []string
}

// GrantFor is the grant of a step of child with role, which the manager
// built into the step's token (names.StateAudience): the role is the
// child's, fixed when it was made, never the TerraformRun's spec as it is
// now. deps are the outputs Secrets ("namespace/name") of the run's
// dependencies in other namespaces.
func GrantFor(run *infrav1.TerraformRun, child string, role Role, deps []string) (Grant, error) {
	if !names.IsChildOf(child, run.Name) {
		return Grant{}, fmt.Errorf("%s is not a child of TerraformRun %s", child, run.Name)
	}
	switch role {
	case RoleRunner, RolePlanner, RolePreview:
	default:
		return Grant{}, fmt.Errorf("no such role %q", role)
	}
	g := Grant{Namespace: run.Namespace, Run: run.Name, RunUID: run.UID, Child: child, Role: role, Dependencies: deps}
	if suffix, ok := names.KubernetesStateSuffix(run); ok {
		g.Workspace = run.Spec.Terraform.Workspace
		if g.Workspace == "" {
			g.Workspace = "default"
		}
		g.Suffix = suffix
		g.State = names.StateSecretName(g.Workspace, suffix)
		g.Lock = names.StateLeaseName(g.Workspace, suffix)
	}
	return g, nil
}

// The labels terraform's kubernetes backend puts on a state Secret.
const (
	StateWorkspaceLabel = "tfstateWorkspace"
	StateSuffixLabel    = "tfstateSecretSuffix"
)

// Verb is an API verb the state API serves.
type Verb string

const (
	Get    Verb = "get"
	List   Verb = "list"
	Create Verb = "create"
	Update Verb = "update"
	Delete Verb = "delete"
)

// Resource is secrets or leases.
type Resource string

const (
	Secrets Resource = "secrets"
	Leases  Resource = "leases"
)

// Request is one call, as Decide sees it.
type Request struct {
	Verb      Verb
	Resource  Resource
	Namespace string
	Name      string
	// Object is the metadata of the object a create or an update sends;
	// Type its type (a Secret's).
	Object *metav1.ObjectMeta
	Type   string
	// Stored is the object as the API server holds it, where it matters:
	// an update or a delete of, and each item a get or a list returns
	// of, a Secret that is not the state.
	Stored *metav1.ObjectMeta
}

// Forbidden is Decide's answer to a call the grant does not cover.
type Forbidden struct{ Reason string }

func (f *Forbidden) Error() string { return f.Reason }

func forbid(format string, args ...any) error {
	return &Forbidden{Reason: fmt.Sprintf(format, args...)}
}

// Decide says whether g allows r: nil, or a *Forbidden that says why.
func (g Grant) Decide(r Request) error {
	what := fmt.Sprintf("%s %s %s/%s", r.Verb, r.Resource, r.Namespace, r.Name)
	if r.Verb == List {
		what = fmt.Sprintf("list %s in %s", r.Resource, r.Namespace)
	}
	if r.Namespace != g.Namespace {
		if r.Resource == Secrets && r.Verb == Get && slices.Contains(g.Dependencies, r.Namespace+"/"+r.Name) {
			return nil
		}
		return forbid("%s: the steps of %s reach only their own namespace's objects, and the outputs of their dependencies", what, g.Child)
	}
	switch r.Resource {
	case Leases:
		return g.decideLease(r, what)
	case Secrets:
		return g.decideSecret(r, what)
	}
	return forbid("%s: the state API serves only Secrets and Leases", what)
}

func (g Grant) decideLease(r Request, what string) error {
	switch {
	case g.Lock == "" || r.Name != g.Lock:
		return forbid("%s: the only Lease the steps of %s use is their state's lock %s", what, g.Child, orNone(g.Lock))
	case g.Role == RolePreview:
		return forbid("%s: a preview plans without the state lock (-lock=false); it never takes the tracked run's lock", what)
	case r.Verb == List:
		return forbid("%s: list is not served", what)
	}
	return nil
}

func (g Grant) decideSecret(r Request, what string) error {
	if r.Verb == Create || r.Verb == Update {
		if r.Type != "" && r.Type != "Opaque" {
			return forbid("%s: the steps write Opaque Secrets only, not %s (a service-account token Secret would be filled with another account's token)", what, r.Type)
		}
		if r.Object != nil {
			for k := range r.Object.Annotations {
				if strings.Contains(k, "kubernetes.io/") {
					return forbid("%s: the steps set no %s annotation", what, k)
				}
			}
		}
	}
	if g.State != "" && r.Name == g.State {
		return g.decideState(r, what)
	}
	if r.Verb == List {
		// A list is served item by item (the server filters it): what
		// the steps list is their own and their run's kept states.
		return nil
	}
	if r.Verb == Create {
		return g.ownObject(r.Name, r.Object, what)
	}
	if r.Stored == nil {
		return forbid("%s: not checked against the stored object", what)
	}
	if err := g.ownObject(r.Name, r.Stored, what); err == nil {
		if r.Verb == Update {
			return g.ownObject(r.Name, r.Object, what)
		}
		return nil
	}
	if g.keptState(r.Stored) && g.Role == RoleRunner && (r.Verb == Get || r.Verb == Delete) {
		return nil
	}
	return forbid("%s: the steps of %s read and write only their own Secrets (named %s-…, owned by it or by TerraformRun %s), their state %s and their run's kept states", what, g.Child, g.Child, g.Run, orNone(g.State))
}

// decideState decides a call on the state Secret: the backend's get,
// create (a new workspace) and update, and its delete (terraform
// workspace delete).
func (g Grant) decideState(r Request, what string) error {
	for _, m := range []*metav1.ObjectMeta{r.Stored, r.Object} {
		if m == nil {
			continue
		}
		if ws, ok := m.Labels[StateWorkspaceLabel]; ok && ws != g.Workspace {
			return forbid("%s: the state of workspace %q, not of this run's %q (another run's whose workspace and secret suffix join into the same name)", what, ws, g.Workspace)
		}
		if sfx, ok := m.Labels[StateSuffixLabel]; ok && sfx != g.Suffix {
			return forbid("%s: the state of secret suffix %q, not of this run's %q (another run's whose workspace and secret suffix join into the same name)", what, sfx, g.Suffix)
		}
	}
	switch r.Verb {
	case Get, List:
		return nil
	case Create:
		if g.Role == RolePreview {
			return forbid("%s: a preview reads the tracked run's state and never writes it", what)
		}
	case Update, Delete:
		if g.Role != RoleRunner {
			return forbid("%s: only the runner's steps (after the approval gate) change the state; the %s reads it", what, g.Role)
		}
	}
	if r.Object != nil {
		if err := noReserved(r.Object, what); err != nil {
			return err
		}
		if len(r.Object.OwnerReferences) > 0 {
			return forbid("%s: the state Secret is owned by nothing (it outlives the run's objects)", what)
		}
	}
	return nil
}

// ownObject says whether a Secret is the child's own: named after it,
// owned by it or by the TerraformRun, and labelled for no other run.
func (g Grant) ownObject(name string, m *metav1.ObjectMeta, what string) error {
	if m == nil || !strings.HasPrefix(name, g.Child+"-") {
		return forbid("%s: the Secrets the steps of %s write are named %s-…", what, g.Child, g.Child)
	}
	owned := false
	for _, o := range m.OwnerReferences {
		switch {
		case o.UID == g.RunUID && o.Kind == "TerraformRun" && o.Name == g.Run:
			owned = true
		case o.Name == g.Child && o.Kind != "TerraformRun":
			owned = true
		default:
			return forbid("%s: owned by %s %s, not by %s or TerraformRun %s", what, o.Kind, o.Name, g.Child, g.Run)
		}
	}
	if !owned {
		return forbid("%s: a Secret the steps of %s write is owned by it or by TerraformRun %s", what, g.Child, g.Run)
	}
	for k, v := range m.Labels {
		switch k {
		case infrav1.RunNameLabel:
			if v != g.Run {
				return forbid("%s: label %s=%s names another TerraformRun than %s", what, k, v, g.Run)
			}
		case records.RunIDLabel:
			if v != g.Child {
				return forbid("%s: label %s=%s names another child than %s", what, k, v, g.Child)
			}
		case records.KindLabel:
			if v == string(records.KindErroredState) && g.Role != RoleRunner {
				return forbid("%s: only the runner's steps keep a state (the %s's would be pushed into the real state)", what, g.Role)
			}
		}
	}
	return nil
}

// keptState says whether a stored Secret is a chunk of a state an
// earlier child of the run kept (a record of kind errored.tfstate):
// labelled for the run and owned by it.
func (g Grant) keptState(m *metav1.ObjectMeta) bool {
	if m.Labels[records.KindLabel] != string(records.KindErroredState) || m.Labels[infrav1.RunNameLabel] != g.Run || !strings.HasPrefix(m.Name, g.Run+"-") {
		return false
	}
	for _, o := range m.OwnerReferences {
		if o.UID == g.RunUID {
			return true
		}
	}
	return false
}

// noReserved refuses opr8r's labels and annotations on the state Secret,
// which only terraform's backend writes.
func noReserved(m *metav1.ObjectMeta, what string) error {
	for _, kv := range []map[string]string{m.Labels, m.Annotations} {
		for k := range kv {
			if strings.HasPrefix(k, infrav1.GroupVersion.Group+"/") {
				return forbid("%s: the state Secret carries no %s label or annotation (%s)", what, infrav1.GroupVersion.Group, k)
			}
		}
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "(none: the run's state is in another backend)"
	}
	return s
}
