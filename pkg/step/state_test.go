package step_test

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opr8r/opr8r/pkg/records"
	"github.com/opr8r/opr8r/pkg/step"
)

// stateServer is a real terraform http state backend whose writes (and
// unlocks) fail while it is "down": the API server or bucket behind a
// state backend restarting at the end of an apply.
type stateServer struct {
	mu        sync.Mutex
	state     []byte
	downUntil time.Time // POSTs fail until then, once the first one failed
	downFor   time.Duration
	failLock  bool // UNLOCK fails
	postFails int
}

func (s *stateServer) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case req.URL.Path == "/lock" && req.Method == "LOCK":
		w.WriteHeader(http.StatusOK)
	case req.URL.Path == "/lock" && req.Method == "UNLOCK":
		if s.failLock {
			http.Error(w, "backend restarting", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	case req.Method == http.MethodGet:
		if s.state == nil {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		_, _ = w.Write(s.state)
	case req.Method == http.MethodPost:
		if s.downFor > 0 && s.downUntil.IsZero() {
			s.downUntil = time.Now().Add(s.downFor)
		}
		if time.Now().Before(s.downUntil) {
			s.postFails++
			http.Error(w, "backend restarting", http.StatusServiceUnavailable)
			return
		}
		b, _ := io.ReadAll(req.Body)
		s.state = b
		w.WriteHeader(http.StatusOK)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

func (s *stateServer) resources() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st struct{ Resources []json.RawMessage }
	_ = json.Unmarshal(s.state, &st)
	return len(st.Resources)
}

// TestApplySavesTheStateTheBackendDidNotTake: when the state backend does
// not answer at the end of an apply, terraform keeps the state in
// errored.tfstate; the apply step saves it once the backend is back, so
// the resources it made are not lost, and the apply succeeds. A backend
// that stays away fails the step with a message that says where the state
// is; a lock that could not be released is left to cleanup; a real error
// of the apply is still an error.
func TestApplySavesTheStateTheBackendDidNotTake(t *testing.T) {
	cases := map[string]struct {
		module     string
		downFor    time.Duration
		lock       bool
		failUnlock bool
		retry      time.Duration
		wantErr    []string
		wantLog    []string
		wantState  int
		wantKept   bool
		wantFailed bool
	}{
		"the backend is down for 3s at the end of the apply": {
			module: okModule, downFor: 3 * time.Second, retry: time.Minute,
			wantLog: []string{"kept it in errored.tfstate", "the state is saved"}, wantState: 1, wantFailed: true,
		},
		"the backend does not come back": {
			module: okModule, downFor: time.Hour, retry: 3 * time.Second,
			wantErr: []string{"Failed to save state", "could not be saved to the backend", "terraform state push errored.tfstate"}, wantKept: true, wantFailed: true,
		},
		"the state lock cannot be released": {
			module: okModule, lock: true, failUnlock: true, retry: time.Minute,
			wantLog: []string{"the state lock could not be released", "the cleanup step releases it"}, wantState: 1,
		},
		"the apply fails, and so does saving its state": {
			module: failingModule, downFor: 3 * time.Second, retry: time.Minute,
			wantErr: []string{"local-exec", "exit 3"}, wantLog: []string{"the state is saved"}, wantState: 1, wantFailed: true,
		},
	}
	for bin, path := range binaries(t) {
		for name, tc := range cases {
			t.Run(bin+"/"+name, func(t *testing.T) {
				ctx := context.Background()
				server := &stateServer{downFor: tc.downFor}
				srv := httptest.NewServer(server)
				defer srv.Close()
				dir := t.TempDir()
				write(t, filepath.Join(dir, "main.tf"), tc.module)
				cfg := filepath.Join(t.TempDir(), "backend.hcl")
				hcl := "address = \"" + srv.URL + "/state\"\nretry_max = 0\n"
				if tc.lock {
					hcl += "lock_address = \"" + srv.URL + "/lock\"\nunlock_address = \"" + srv.URL + "/lock\"\n"
				}
				write(t, cfg, hcl)
				var out bytes.Buffer
				r := &step.Runner{Terraform: path, Out: &out, ResultsDir: t.TempDir(), StateRetry: tc.retry}
				mod := step.Module{Dir: dir, Workspace: "default"}
				if err := r.Init(ctx, mod, step.Backend{Type: "http", ConfigFile: cfg}); err != nil {
					t.Fatalf("init: %v\n%s", err, out.String())
				}
				planFile := filepath.Join(t.TempDir(), "tfplan")
				if _, err := r.Plan(ctx, mod, step.PlanOptions{PlanFile: planFile}); err != nil {
					t.Fatalf("plan: %v\n%s", err, out.String())
				}
				digest, err := step.FileDigest(planFile)
				if err != nil {
					t.Fatal(err)
				}
				server.mu.Lock()
				server.failLock = tc.failUnlock // from the apply on: the plan released its lock
				server.mu.Unlock()
				err = r.Apply(ctx, mod, planFile, digest)
				switch {
				case len(tc.wantErr) == 0 && err != nil:
					t.Fatalf("apply: %v\n%s", err, out.String())
				case len(tc.wantErr) > 0 && err == nil:
					t.Fatalf("apply succeeded, want an error with %q\n%s", tc.wantErr, out.String())
				}
				for _, want := range tc.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("apply error %q lacks %q", err, want)
					}
				}
				for _, want := range tc.wantLog {
					if !strings.Contains(out.String(), want) {
						t.Errorf("the step's log lacks %q:\n%s", want, out.String())
					}
				}
				if got := server.resources(); got != tc.wantState {
					t.Errorf("the backend's state holds %d resources, want %d", got, tc.wantState)
				}
				_, statErr := os.Stat(filepath.Join(dir, step.ErroredStateFile))
				if kept := statErr == nil; kept != tc.wantKept {
					t.Errorf("errored.tfstate kept: %v, want %v", kept, tc.wantKept)
				}
				if failed := server.postFails > 0; failed != tc.wantFailed {
					t.Errorf("the backend refused %d state writes; want refusals: %v (the case did not happen)", server.postFails, tc.wantFailed)
				}
			})
		}
	}
}

const okModule = `resource "terraform_data" "thing" { input = "v" }`

// failingModule makes its resource, then fails in its provisioner: the
// resource is tainted in the state, which must still be saved.
const failingModule = `
resource "terraform_data" "thing" {
  input = "v"
  provisioner "local-exec" { command = "exit 3" }
}`

// TestAStateTheBackendDidNotTakeOutlivesTheRun: a backend away longer than
// the apply's retry leaves the state in errored.tfstate, on a workspace the
// engines delete when the run ends. The apply step keeps it as a record of
// the TerraformRun (Secrets named after the child, owned by the
// TerraformRun) and says so; the next run's init, the planner's, does not
// push it; its restore-state step, the runner's, pushes it to the backend
// before anything plans, and deletes it. Real terraform and OpenTofu, a
// real http backend, a real API server.
func TestAStateTheBackendDidNotTakeOutlivesTheRun(t *testing.T) {
	needKube(t)
	for bin, path := range binaries(t) {
		t.Run(bin, func(t *testing.T) {
			ctx := context.Background()
			ns := namespace(t)
			server := &stateServer{downFor: time.Hour}
			srv := httptest.NewServer(server)
			defer srv.Close()
			cfg := filepath.Join(t.TempDir(), "backend.hcl")
			write(t, cfg, "address = \""+srv.URL+"/state\"\nretry_max = 0\n")
			be := step.Backend{Type: "http", ConfigFile: cfg}
			keeper := newKeeper(ns, "keeper", "keeper-1")

			var out bytes.Buffer
			r := &step.Runner{Terraform: path, Out: &out, ResultsDir: t.TempDir(), StateRetry: 2 * time.Second, KeptStates: keeper}
			dir := t.TempDir()
			write(t, filepath.Join(dir, "main.tf"), okModule)
			mod := step.Module{Dir: dir, Workspace: "default"}
			if err := r.Init(ctx, mod, be); err != nil {
				t.Fatalf("init: %v\n%s", err, out.String())
			}
			planFile := filepath.Join(t.TempDir(), "tfplan")
			if _, err := r.Plan(ctx, mod, step.PlanOptions{PlanFile: planFile}); err != nil {
				t.Fatalf("plan: %v\n%s", err, out.String())
			}
			digest, err := step.FileDigest(planFile)
			if err != nil {
				t.Fatal(err)
			}
			err = r.Apply(ctx, mod, planFile, digest)
			if err == nil || !strings.Contains(err.Error(), "the state is kept in the Secrets "+ns+"/keeper-1-rec-") || !strings.Contains(err.Error(), "kubectl tfrun rerun keeper") {
				t.Fatalf("apply with the backend away: %v; want it to say the state is kept in the Secrets %s/keeper-1-rec-… and how it gets back", err, ns)
			}
			if n := len(keptSecrets(t, ns, "keeper")); n == 0 {
				t.Fatal("no kept state Secret")
			}
			if server.resources() != 0 {
				t.Fatal("the backend took the state while it was away: the case did not happen")
			}

			// The backend is back; the run's workspace is gone. The next
			// run's init, the planner's, leaves the kept state alone.
			server.mu.Lock()
			server.downFor, server.downUntil = 0, time.Now()
			server.mu.Unlock()
			out.Reset()
			next := t.TempDir()
			write(t, filepath.Join(next, "main.tf"), okModule)
			planner := &step.Runner{Terraform: path, Out: &out, ResultsDir: t.TempDir(), KeptStates: newKeeper(ns, "keeper", "keeper-2")}
			if err := planner.Init(ctx, step.Module{Dir: next, Workspace: "default"}, be); err != nil {
				t.Fatalf("the next init: %v\n%s", err, out.String())
			}
			if got := server.resources(); got != 0 || len(keptSecrets(t, ns, "keeper")) == 0 {
				t.Fatalf("the planner's init pushed the kept state (the backend holds %d resources)", got)
			}

			// Its restore-state step, the runner's, pushes it.
			runner := &step.Runner{Terraform: path, Out: &out, ResultsDir: t.TempDir(), KeptStates: newKeeper(ns, "keeper", "keeper-2")}
			if err := runner.RestoreState(ctx, "default", be); err != nil {
				t.Fatalf("restore-state: %v\n%s", err, out.String())
			}
			if got := server.resources(); got != 1 {
				t.Fatalf("after restore-state the backend's state holds %d resources, want the 1 the apply made\n%s", got, out.String())
			}
			if !strings.Contains(out.String(), "pushed the state an earlier run kept in the Secrets "+ns+"/keeper-1-rec-") {
				t.Errorf("restore-state's log does not say it pushed the kept state:\n%s", out.String())
			}
			if left := keptSecrets(t, ns, "keeper"); len(left) != 0 {
				t.Errorf("the kept state's Secrets are still there after its state was pushed: %d", len(left))
			}
			// The plan after it sees the resource: nothing to add.
			sum, err := planner.Plan(ctx, step.Module{Dir: next, Workspace: "default"}, step.PlanOptions{PlanFile: filepath.Join(t.TempDir(), "p")})
			if err != nil || sum.HasChanges {
				t.Fatalf("the plan after the push: %+v, %v; want no changes (the state holds the resource)", sum, err)
			}
		})
	}
}

// newKeeper is what opr8r-step gives a step of child of TerraformRun run:
// the run's records store, owned by the TerraformRun.
func newKeeper(ns, run, child string) *step.StateKeeper {
	owner := &metav1.OwnerReference{APIVersion: "infra.opr8r.io/v1alpha1", Kind: "TerraformRun", Name: run, UID: types.UID("uid-" + run)}
	return &step.StateKeeper{Records: records.NewRouter(kube, owner), Key: records.Key{Namespace: ns, Run: run, RunID: child, Step: "apply"}, Owner: owner}
}

// keptSecrets are the Secrets of the states kept for run.
func keptSecrets(t *testing.T, ns, run string) []corev1.Secret {
	t.Helper()
	l, err := kube.CoreV1().Secrets(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "infra.opr8r.io/run=" + run + "," + records.KindLabel + "=errored.tfstate"})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// stateJSON is a terraform state of lineage and serial with one output of
// at least size bytes, of random text (gzip does not shrink it much).
func stateJSON(t *testing.T, lineage string, serial, size int) []byte {
	t.Helper()
	raw := make([]byte, size*3/4+1)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(map[string]any{
		"version": 4, "terraform_version": "1.5.0", "serial": serial, "lineage": lineage,
		"outputs":   map[string]any{"blob": map[string]any{"value": base64.StdEncoding.EncodeToString(raw), "type": "string"}},
		"resources": []any{}, "check_results": nil,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRestoreState: restore-state pushes the states earlier runs kept,
// oldest first, whatever their size (a state over 1 MiB, over a Secret's
// limit), and deletes each once pushed; it fails, naming the kept state
// and the fix, when the backend refuses one (another lineage), and keeps
// it; it pushes no state the TerraformRun does not own. Real terraform and
// OpenTofu, a real http backend, a real API server.
func TestRestoreState(t *testing.T) {
	needKube(t)
	// The backend holds a state of the run's lineage, as after its first
	// apply (terraform gives a state pushed into an empty remote backend a
	// lineage of its own).
	const lineage = "8a0c5a3e-2b51-4c7e-9d1f-5e0f3c1a7b21"
	type kept struct {
		child   string
		lineage string
		size    int
		owner   string // "" : the TerraformRun
	}
	cases := map[string]struct {
		backendLineage string
		kept           []kept
		wantErr        []string
		wantBackend    int // the kept state the backend holds after (-1: its own)
		wantLeft       int // kept states left
		wantLog        []string
	}{
		"a state over 1 MiB": {
			kept:        []kept{{child: "r-3", size: 3 << 19}},
			wantBackend: 0,
			wantLog:     []string{"pushed the state an earlier run kept in the Secrets"},
		},
		"two, oldest first": {
			kept:        []kept{{child: "r-3", size: 10}, {child: "r-4", size: 10}},
			wantBackend: 1,
		},
		"refused: another lineage": {
			backendLineage: "another-lineage-0000",
			kept:           []kept{{child: "r-3", size: 10}},
			wantErr:        []string{"the state an earlier run kept in the Secrets ", "/r-3-rec-", "could not be pushed", "if the backend holds it already, delete those Secrets", "terraform state push (-force if it is older than the backend's)", "kubectl tfrun kept-state r -n "},
			wantBackend:    -1, wantLeft: 1,
		},
		"not the TerraformRun's": {
			kept:        []kept{{child: "r-3", owner: "uid-someone-else", size: 10}},
			wantBackend: -1, wantLeft: 1,
			wantLog: []string{"but that TerraformRun does not own them: not pushed"},
		},
		"none": {wantBackend: -1, wantLog: []string{"no state an earlier run kept is left to push"}},
	}
	for bin, path := range binaries(t) {
		for name, tc := range cases {
			t.Run(bin+"/"+name, func(t *testing.T) {
				ctx := context.Background()
				ns := namespace(t)
				own := stateJSON(t, cmp.Or(tc.backendLineage, lineage), 1, 10)
				server := &stateServer{state: own}
				srv := httptest.NewServer(server)
				defer srv.Close()
				cfg := filepath.Join(t.TempDir(), "backend.hcl")
				write(t, cfg, "address = \""+srv.URL+"/state\"\nlock_address = \""+srv.URL+"/lock\"\nunlock_address = \""+srv.URL+"/lock\"\nretry_max = 0\n")
				be := step.Backend{Type: "http", ConfigFile: cfg}
				var states [][]byte
				for i, k := range tc.kept {
					keeper := newKeeper(ns, "r", k.child)
					store := keeper.Records
					if k.owner != "" {
						store = records.NewRouter(kube, &metav1.OwnerReference{APIVersion: "infra.opr8r.io/v1alpha1", Kind: "TerraformRun", Name: "r", UID: types.UID(k.owner)})
					}
					key := keeper.Key
					key.Kind = records.KindErroredState
					states = append(states, stateJSON(t, lineage, 2+5*i, k.size))
					if err := store.Put(ctx, key, states[i]); err != nil {
						t.Fatal(err)
					}
				}
				var out bytes.Buffer
				r := &step.Runner{Terraform: path, Out: &out, ResultsDir: t.TempDir(), KeptStates: newKeeper(ns, "r", "r-5")}
				err := r.RestoreState(ctx, "default", be)
				if len(tc.wantErr) == 0 && err != nil {
					t.Fatalf("restore-state: %v\n%s", err, out.String())
				}
				for _, w := range tc.wantErr {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Errorf("restore-state: %v; want it to say %q", err, w)
					}
				}
				for _, w := range tc.wantLog {
					if !strings.Contains(out.String(), w) {
						t.Errorf("the log does not say %q:\n%s", w, out.String())
					}
				}
				want := own
				if tc.wantBackend >= 0 {
					want = states[tc.wantBackend]
				}
				if got, want := blob(t, server.state), blob(t, want); got != want {
					t.Errorf("the backend holds an output of %d bytes, want the %d of kept state %d", len(got), len(want), tc.wantBackend)
				}
				recs, err := r.KeptStates.Records.List(ctx, ns, "r")
				if err != nil {
					t.Fatal(err)
				}
				if left := len(records.KeptStates(recs, "")); left != tc.wantLeft {
					t.Errorf("%d kept states left, want %d", left, tc.wantLeft)
				}
			})
		}
	}
}

// blob is the output a stateJSON holds.
func blob(t *testing.T, state []byte) string {
	t.Helper()
	var st struct {
		Outputs struct{ Blob struct{ Value string } }
	}
	if err := json.Unmarshal(state, &st); err != nil {
		t.Fatalf("%v: %.200s", err, state)
	}
	return st.Outputs.Blob.Value
}
