//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/step"
)

// registryClusterIP is the in-cluster registry Service's fixed address
// (the cluster has no DNS): step pods fetch modules from it.
const registryClusterIP = "10.96.200.200"

// startRegistry runs go-containerregistry's registry (crane registry
// serve, built from the module proxy) as a Deployment and Service in the
// e2e namespace, and returns the pod's address, which this host reaches
// through the node's bridge, for pushing.
func (e *env) startRegistry(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": "e2e-registry"}
	dep := &appsv1.Deployment{
		ObjectMeta: objMeta("e2e-registry"),
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "registry", Image: mustEnv(t, "OPR8R_E2E_REGISTRY_IMAGE"), ImagePullPolicy: corev1.PullNever,
						Args:  []string{"registry", "serve", "--address=:5000"},
						Ports: []corev1.ContainerPort{{ContainerPort: 5000}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/v2/", Port: intstr.FromInt32(5000)}},
							PeriodSeconds: 1},
						SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
					}},
				},
			},
		},
	}
	svc := &corev1.Service{
		ObjectMeta: objMeta("e2e-registry"),
		Spec: corev1.ServiceSpec{ClusterIP: registryClusterIP, Selector: labels,
			Ports: []corev1.ServicePort{{Port: 5000, TargetPort: intstr.FromInt32(5000)}}},
	}
	for _, o := range []client.Object{dep, svc} {
		if err := e.c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating the registry's %T: %v", o, err)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pods := &corev1.PodList{}
		if err := e.c.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.Status.PodIP != "" {
					t.Logf("registry pod %s ready at %s:5000, Service %s:5000", p.Name, p.Status.PodIP, registryClusterIP)
					return p.Status.PodIP + ":5000"
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the registry pod is not ready after 2m: %+v", pods.Items)
		}
		time.Sleep(time.Second)
	}
}

// pushModule pushes files as a Flux artifact (what `flux push artifact`
// makes: config application/vnd.cncf.flux.config.v1+json, one gzipped tar
// layer) and returns its manifest digest.
func pushModule(t *testing.T, registry, repo, tag string, files map[string]string) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for p, c := range files {
		if err := tw.WriteHeader(&tar.Header{Name: p, Mode: 0o644, Size: int64(len(c)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, step.FluxConfigMediaType)
	img, err := mutate.Append(img, mutate.Addendum{Layer: static.NewLayer(buf.Bytes(), step.FluxContentMediaType)})
	if err != nil {
		t.Fatal(err)
	}
	img = mutate.Annotations(img, map[string]string{"org.opencontainers.image.source": "opr8r-e2e", "org.opencontainers.image.revision": tag}).(v1.Image)
	ref, err := name.ParseReference(registry+"/"+repo+":"+tag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithTransport(http.DefaultTransport)); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pushed %s: %s", ref, d)
	return d.String()
}

func ociManifest(name, engine, tag, secret string) string {
	creds := ""
	if secret != "" {
		creds = ", credentialsSecretRef: {name: " + secret + "}"
	}
	return fmt.Sprintf(`apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRun
metadata: {name: %s, namespace: %s}
spec:
  engine: %s
  source:
    oci: {url: "oci://%s:5000/modules/hello", tag: %s, path: stacks/hello, insecure: true%s}
  terraform:
    vars: [{name: greeting, value: "Hello from OCI"}]
  approval: {mode: Auto}
  outputs: {rename: {message: greeting_message}}
  history: {keepFinished: 1}
  deletionPolicy: Destroy
  runner: {workspace: {size: 64Mi}}
`, name, ns, engine, registryClusterIP, tag, creds)
}

// TestOCISource runs one TerraformRun per engine from a Flux-format
// artifact in a registry running in the cluster: the step pod fetches it
// by tag through the registry's Service, the run applies, and the
// manifest digest is its revision in status and history. On the Job
// engine the registry credentials come from a dockerconfigjson Secret,
// mounted into the clone step (the registry accepts anyone; the Secret is
// still read), so the mount is exercised for real.
func TestOCISource(t *testing.T) {
	// The scenario tests run side by side (make e2e runs the faults of
	// TestChaos apart, after them).
	t.Parallel()
	e := setup(t)
	reg := e.startRegistry(t)
	digest := pushModule(t, reg, "modules/hello", "v1", map[string]string{"stacks/hello/main.tf": module, "README.md": "hello module\n"})
	pull := &corev1.Secret{ObjectMeta: objMeta("e2e-registry-creds"), Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(fmt.Sprintf(`{"auths":{"%s:5000":{"username":"robot","password":"e2e-registry-pa55word"}}}`, registryClusterIP))}}
	if err := e.c.Create(context.Background(), pull); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, engine := range allEngines() {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			name := "oci-" + engine
			t.Cleanup(func() { _ = e.c.Delete(context.Background(), &infrav1.TerraformRun{ObjectMeta: objMeta(name)}) })
			secret := ""
			if engine == "job" {
				secret = pull.Name
			}
			e.sh(t, ociManifest(name, engine, "v1", secret), e.kubectl, "apply", "-f", "-")
			run := e.waitFor(t, name, "applied from the OCI artifact", 6*time.Minute, ready)
			if run.Status.Run.Commit != digest {
				t.Fatalf("status.run.commit = %q, want the artifact's manifest digest %s", run.Status.Run.Commit, digest)
			}
			if len(run.Status.History) == 0 || run.Status.History[0].Revision != digest {
				t.Fatalf("history = %+v, want the newest record's revision %s", run.Status.History, digest)
			}
			e.checkOutputs(t, name, "Hello from OCI")
			out := e.sh(t, "", e.tfrun, "history", name, "-n", ns)
			if !strings.Contains(out, digest[:19]) {
				t.Fatalf("kubectl tfrun history does not show the revision %s:\n%s", digest[:19], out)
			}
			logs := e.sh(t, "", e.tfrun, "logs", name, "-n", ns, "--step", "clone")
			if !strings.Contains(logs, "fetched oci://"+registryClusterIP+":5000/modules/hello at v1 (digest "+digest+")") {
				t.Fatalf("the clone step's log does not say what it fetched:\n%s", logs)
			}
			if strings.Contains(logs, "e2e-registry-pa55word") {
				t.Fatal("the registry password is in the clone step's log")
			}

			// The records outlive the run's engine object and pods: a rerun
			// (keepFinished 1) prunes the first run's child, and its plan
			// step's log and its plan are still there.
			first := run.Status.Run.ID
			e.sh(t, "", e.tfrun, "rerun", name, "-n", ns)
			e.waitFor(t, name, "the rerun finished and the first run's child pruned", 6*time.Minute, func(r *infrav1.TerraformRun) bool {
				return r.Status.Run != nil && r.Status.Run.ID != first && ready(r) && e.childGone(t, r, first)
			})
			old := e.sh(t, "", e.tfrun, "logs", name, "-n", ns, "--run", first, "--step", "plan")
			if !strings.Contains(old, "opr8r-step: plan: +1 ~0 -0") || !strings.Contains(old, "terraform_data.hello will be created") {
				t.Fatalf("kubectl tfrun logs --run %s --step plan, after its child was pruned:\n%s", first, old)
			}
			t.Logf("kubectl tfrun logs %s --run %s --step plan (its %s and pods pruned):\n%s", name, first, run.Status.Run.Child.Kind, old)
			plan := e.sh(t, "", e.tfrun, "plan", name, "-n", ns, "--run", first)
			if !strings.Contains(plan, "terraform_data.hello will be created") {
				t.Fatalf("kubectl tfrun plan --run %s after its child was pruned:\n%s", first, plan)
			}
		})
	}
}

// childGone says whether the engine object named id and its pods are gone.
func (e *env) childGone(t *testing.T, r *infrav1.TerraformRun, id string) bool {
	t.Helper()
	pods := &corev1.PodList{}
	number := id[strings.LastIndex(id, "-")+1:]
	if err := e.c.List(context.Background(), pods, client.InNamespace(ns),
		client.MatchingLabels{infrav1.RunNameLabel: r.Name, infrav1.RunNumberLabel: number}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) > 0 {
		return false
	}
	out, err := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "get", strings.ToLower(r.Status.Run.Child.Kind)+"s", id, "-n", ns, "--ignore-not-found", "-o", "name").CombinedOutput()
	return err == nil && strings.TrimSpace(string(out)) == ""
}
