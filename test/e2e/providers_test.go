//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/names"
)

// providersNS is a namespace whose provider cache no other scenario
// fills, so its first run is the one that fetches.
const providersNS = "e2e-providers"

// providerModule requires the source-built kubernetes provider, which
// the install's mirror serves (cluster.sh provider_mirror_up), and runs
// it: plan and apply load its schema, so a cached package that does not
// run fails the run.
func providerRun(name, engine string) string {
	return providerRunOf(name, engine, providerModule(name))
}

// providerRunLocked is providerRun's module with its lock file committed.
func providerRunLocked(name, engine, lock string) string {
	return providerRunOfFiles(name, engine, map[string]string{"main.tf": providerModule(name), names.LockFile: lock})
}

func providerModule(name string) string {
	return fmt.Sprintf(`terraform {
  required_providers {
    kubernetes = { source = "hashicorp/kubernetes", version = %q }
  }
}
provider "kubernetes" {
  load_config_file = false
}
resource "terraform_data" "run" { input = %q }
`, "1.13.4", name)
}

// providerLockFile is the lock file a module requiring the kubernetes
// provider commits: the package's h1 checksum, which the mirror logs.
func (e *env) providerLockFile(t *testing.T) string {
	t.Helper()
	logs, err := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "logs", "-n", "opr8r-system", "deploy/provider-mirror").CombinedOutput()
	m := regexp.MustCompile(`registry\.terraform\.io/hashicorp/kubernetes 1\.13\.4: \S+, zh:[0-9a-f]+, (h1:\S+)`).FindSubmatch(logs)
	if err != nil || m == nil {
		t.Fatalf("the mirror's log has no h1 checksum of the kubernetes provider (%v):\n%s", err, logs)
	}
	return fmt.Sprintf("provider %q {\n  version     = \"1.13.4\"\n  constraints = \"1.13.4\"\n  hashes = [\n    %q,\n  ]\n}\n",
		"registry.terraform.io/hashicorp/kubernetes", string(m[1]))
}

// providerRunOf is an Auto run of the module in the providers namespace.
func providerRunOf(name, engine, module string) string {
	return providerRunOfFiles(name, engine, map[string]string{"main.tf": module})
}

func providerRunOfFiles(name, engine string, module map[string]string) string {
	files, _ := json.Marshal(module)
	return fmt.Sprintf(`apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRun
metadata: {name: %s, namespace: %s}
spec:
  engine: %s
  source: {inline: {files: %s}}
  approval: {mode: Auto}
  deletionPolicy: Retain
  runner: {workspace: {size: 64Mi}}
`, name, providersNS, engine, files)
}

var initDone = regexp.MustCompile(`opr8r-step: init done in ([0-9.]+m?s) \(terraform ([0-9.]+m?s)\)`)

// TestProviderCache: the install points terraform at an in-cluster
// provider network mirror over TLS (--provider-mirror-url, its CA) and
// keeps a plugin cache per namespace (--provider-cache-claim). On each
// engine, with the namespace's cache emptied first (its claim deleted),
// the first run's init fetches the kubernetes provider from the mirror
// and the next run's, whose module commits its lock file, takes it from
// the cache and fetches nothing, as terraform's own lines say: terraform
// takes a cached package only when the lock file lists its checksum. It reports init's time, first against later
// (P10), and asserts nothing on it: make e2e runs it beside the other
// scenarios, and times are the bench's (docs/performance.md).
func TestProviderCache(t *testing.T) {
	t.Parallel()
	e := setup(t)
	began := time.Now()
	type result struct {
		run, engine string
		init, tf    time.Duration
	}
	var results []result
	const fetched, cached = "- Installed hashicorp/kubernetes v1.13.4 (verified checksum)", "- Using hashicorp/kubernetes v1.13.4 from the shared cache directory"
	lock := e.providerLockFile(t)
	for _, engine := range []string{"job", "argo", "tekton"} {
		e.emptyProviderCache(t)
		for i := range 2 {
			name := fmt.Sprintf("providers-%s-%d", engine, i+1)
			manifest := providerRun(name, engine)
			if i > 0 {
				manifest = providerRunLocked(name, engine, lock)
			}
			out, d, tf := e.initOf(t, name, manifest)
			results = append(results, result{name, engine, d, tf})
			switch {
			case i == 0 && !strings.Contains(out, fetched):
				t.Errorf("%s, the first run on an empty cache, did not install the provider from the mirror (want %q):\n%s", name, fetched, out)
			case i > 0 && (!strings.Contains(out, cached) || strings.Contains(out, "Installed hashicorp/kubernetes")):
				t.Errorf("%s fetched the provider again instead of taking it from the namespace's cache (want %q):\n%s", name, cached, out)
			}
			// From the mirror (checksums it gave), not the image's
			// local directory, which terraform calls unauthenticated.
			if strings.Contains(out, "unauthenticated") {
				t.Errorf("%s installed an unauthenticated package (the image's directory?):\n%s", name, out)
			}
		}
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := e.c.Get(t.Context(), client.ObjectKey{Namespace: providersNS, Name: "opr8r-provider-cache"}, pvc); err != nil {
		t.Fatalf("the namespace's provider cache claim: %v", err)
	}
	if len(pvc.OwnerReferences) != 0 || pvc.Labels["app.kubernetes.io/managed-by"] != "opr8r" {
		t.Errorf("the cache claim belongs to a run or not to opr8r: %+v", pvc.ObjectMeta)
	}
	// The mirror served the package to this scenario's first runs.
	logs, err := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "logs", "-n", "opr8r-system", "deploy/provider-mirror",
		"--since-time="+began.UTC().Format(time.RFC3339)).CombinedOutput()
	if err != nil || strings.Count(string(logs), "package registry.terraform.io/hashicorp/kubernetes 1.13.4") < 3 {
		t.Errorf("the mirror's log shows fewer than 3 packages served since the scenario began, one per engine's first run (%v):\n%s", err, logs)
	}
	// The floor: init of the same module without the provider (the
	// backend, the lock file, the workspace), on the Job engine.
	_, floor, floorTF := e.initOf(t, "providers-floor", providerRunOf("providers-floor", "job", `resource "terraform_data" "run" { input = "floor" }`))
	t.Logf("P10: terraform init with the kubernetes provider, from the install's mirror, then the namespace's cache:")
	t.Logf("P10:   floor  the module without the provider  init %7s (terraform %7s)", floor, floorTF)
	for i, r := range results {
		first := results[i-i%2].init
		t.Logf("P10:   %-6s %-20s init %7s (terraform %7s)  %3.0f%% of the first", r.engine, r.run, r.init, r.tf, 100*float64(r.init)/float64(first))
	}
	e.sh(t, "", e.kubectl, "delete", "terraformruns", "--all", "-n", providersNS, "--wait=false")
}

// initOf applies an Auto run in the providers namespace, waits for it to
// succeed and returns its init step's log and times (opr8r-step's "init
// done" line).
func (e *env) initOf(t *testing.T, name, manifest string) (string, time.Duration, time.Duration) {
	t.Helper()
	e.sh(t, manifest, e.kubectl, "apply", "-f", "-")
	e.waitForIn(t, providersNS, name, "Succeeded", 6*time.Minute, func(r *infrav1.TerraformRun) bool {
		if runPhase(r) == infrav1.RunFailed {
			t.Fatalf("%s failed: %+v", name, r.Status.Run)
		}
		return runPhase(r) == infrav1.RunSucceeded
	})
	out := e.sh(t, "", e.tfrun, "logs", name, "-n", providersNS, "--step", names.StepInit)
	m := initDone.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("%s: init's log has no \"init done\" line:\n%s", name, out)
	}
	d, _ := time.ParseDuration(m[1])
	tf, _ := time.ParseDuration(m[2])
	return out, d, tf
}

// emptyProviderCache empties the namespace's provider cache: it deletes
// the scenario's runs (Retain: nothing is destroyed) and every pod left in
// the namespace, then the claim, and waits until the claim is gone. A
// claim goes only once no pod that mounted it is left, finished ones
// included (Kubernetes' PVC protection counts every scheduled pod that
// names a claim); the next run's child makes it again.
func (e *env) emptyProviderCache(t *testing.T) {
	t.Helper()
	e.sh(t, "", e.kubectl, "delete", "terraformruns", "--all", "-n", providersNS, "--wait=true", "--timeout=3m")
	e.sh(t, "", e.kubectl, "delete", "pods", "--all", "-n", providersNS, "--wait=true", "--timeout=2m")
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: providersNS, Name: "opr8r-provider-cache"}}
	if err := e.c.Delete(t.Context(), pvc); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := e.c.Get(t.Context(), client.ObjectKeyFromObject(pvc), pvc)
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the provider cache claim is still there 2 minutes after its runs and pods went: %v %+v", err, pvc.Status)
		}
		time.Sleep(time.Second)
	}
}
