package step_test

import (
	"bytes"
	"context"
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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
// engines delete when the run ends. The apply step keeps it in a Secret of
// the TerraformRun and says so; the next run's init pushes it to the
// backend before anything plans, and deletes the Secret. Real terraform
// and OpenTofu, a real http backend, a real API server.
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
			keeper := &step.StateKeeper{Kube: &step.Kube{Client: kube, Namespace: ns}, Run: "keeper", Child: "keeper-1"}

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
			if err == nil || !strings.Contains(err.Error(), "the state is kept in Secret "+ns+"/keeper-1-errored-state") || !strings.Contains(err.Error(), "kubectl tfrun rerun keeper") {
				t.Fatalf("apply with the backend away: %v; want it to say the state is kept in Secret %s/keeper-1-errored-state and how it gets back", err, ns)
			}
			kept, err := kube.CoreV1().Secrets(ns).Get(ctx, "keeper-1-errored-state", metav1.GetOptions{})
			if err != nil || len(kept.Data["errored.tfstate"]) == 0 || kept.Labels["infra.opr8r.io/errored-state-of"] != "keeper" {
				t.Fatalf("kept state Secret: %v, %+v", err, kept)
			}
			if server.resources() != 0 {
				t.Fatal("the backend took the state while it was away: the case did not happen")
			}

			// The backend is back; the run's workspace is gone. The next
			// run's init pushes the kept state before it plans.
			server.mu.Lock()
			server.downFor, server.downUntil = 0, time.Now()
			server.mu.Unlock()
			out.Reset()
			next := t.TempDir()
			write(t, filepath.Join(next, "main.tf"), okModule)
			r2 := &step.Runner{Terraform: path, Out: &out, ResultsDir: t.TempDir(), KeptStates: keeper}
			if err := r2.Init(ctx, step.Module{Dir: next, Workspace: "default"}, be); err != nil {
				t.Fatalf("the next init: %v\n%s", err, out.String())
			}
			if got := server.resources(); got != 1 {
				t.Fatalf("after the next init the backend's state holds %d resources, want the 1 the apply made\n%s", got, out.String())
			}
			if !strings.Contains(out.String(), "pushed the state an earlier run kept in Secret "+ns+"/keeper-1-errored-state") {
				t.Errorf("the init's log does not say it pushed the kept state:\n%s", out.String())
			}
			if _, err := kube.CoreV1().Secrets(ns).Get(ctx, "keeper-1-errored-state", metav1.GetOptions{}); err == nil {
				t.Error("the kept state's Secret is still there after its state was pushed")
			}
			// The plan after it sees the resource: nothing to add.
			sum, err := r2.Plan(ctx, step.Module{Dir: next, Workspace: "default"}, step.PlanOptions{PlanFile: filepath.Join(t.TempDir(), "p")})
			if err != nil || sum.HasChanges {
				t.Fatalf("the plan after the push: %+v, %v; want no changes (the state holds the resource)", sum, err)
			}
		})
	}
}
