//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// victor holds only opr8r's editor role in e2e (no Secret, no ConfigMap):
// the hardened setup docs/security.md recommends for authors. The tests act
// as him through the admin's impersonation (kubectl --as).
const victor = "opr8r-e2e-victor"

// namespaceDeletion (issue 49, 0): deleting a namespace that holds what
// opr8r's policies guard (its guard list, the runner service account, a
// run's Secrets, a kept state, a Lease, and a TerraformRun that no
// manager watches) completes. opr8r-runner-credentials read request.name
// in a match condition, which the namespace controller's DELETECOLLECTION
// of ServiceAccounts does not have: the policy failed closed and every
// namespace deleted while opr8r was installed stayed Terminating.
func (e *env) namespaceDeletion(t *testing.T) {
	const gone = "e2e-gone"
	e.sh(t, fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: opr8r-runner, namespace: %[1]s}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: opr8r-guard, namespace: %[1]s}
data: {children: "gone-1", runnerServiceAccounts: "opr8r-runner"}
---
apiVersion: v1
kind: Secret
metadata: {name: gone-1-plan, namespace: %[1]s}
stringData: {plan.txt: "no changes"}
---
apiVersion: v1
kind: Secret
metadata: {name: gone-1-rec-0123456789-0, namespace: %[1]s, labels: {infra.opr8r.io/component: record, infra.opr8r.io/run: gone, infra.opr8r.io/run-id: gone-1, infra.opr8r.io/step: apply, infra.opr8r.io/record-kind: errored.tfstate}}
stringData: {chunk: "{}"}
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: lock-tfstate-default-gone, namespace: %[1]s}
spec: {holderIdentity: someone}
`, gone), e.kubectl, "apply", "-f", "-")
	m := strings.Replace(securedManifest("gone", "job", "Hi"), "namespace: "+ns, "namespace: "+gone, 1)
	e.sh(t, m, e.kubectl, "apply", "-f", "-")
	run := &infrav1.TerraformRun{}
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: gone, Name: "gone"}, run); err != nil {
		t.Fatal(err)
	}
	if len(run.Finalizers) != 0 {
		t.Errorf("a TerraformRun in %s, which no manager watches, got finalizers %v: nobody would remove them", gone, run.Finalizers)
	}
	start := time.Now()
	out, err := e.as("", "", e.kubectl, "delete", "namespace", gone, "--wait", "--timeout=4m")
	took := time.Since(start).Round(time.Second)
	if err != nil {
		ns := &corev1.Namespace{}
		_ = e.c.Get(context.Background(), types.NamespacedName{Name: gone}, ns)
		recordAttack("all", "delete a namespace with opr8r's objects in it", fmt.Sprintf("NOT DELETED after %s: %v", took, ns.Status.Conditions))
		t.Fatalf("deleting namespace %s: %v\n%s\nits conditions: %+v", gone, err, out, ns.Status.Conditions)
	}
	recordAttack("all", "delete a namespace with opr8r's objects in it", fmt.Sprintf("deleted in %s", took))
}

// editorReadsNothing (issue 49, 5): victor, with only opr8r's editor role,
// may not name in a run, a receiver or a notifier a Secret or a ConfigMap
// he may not read: he would read it back through a plan, a precondition's
// message or a destination of his own.
func (e *env) editorReadsNothing(t *testing.T) {
	e.sh(t, fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: victor-editor, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: opr8r-editor}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: %[2]s}]
---
apiVersion: v1
kind: Secret
metadata: {name: victor-may-not-read, namespace: %[1]s}
stringData: {password: hunter2, token: 0123456789abcdef0123456789}
`, ns, victor), e.kubectl, "apply", "-f", "-")
	t.Cleanup(func() {
		e.sh(t, "", e.kubectl, "delete", "rolebinding", "victor-editor", "-n", ns, "--ignore-not-found")
		e.sh(t, "", e.kubectl, "delete", "secret", "victor-may-not-read", "-n", ns, "--ignore-not-found")
	})
	base := securedManifest("victor-reads", "job", "Hi")
	for _, c := range []struct{ what, from, to, want string }{
		{"an editor names a Secret he may not read in varsFrom", "  approval:", "    varsFrom: [{kind: Secret, name: victor-may-not-read}]\n  approval:", "names Secret victor-may-not-read, which " + victor + " may not read"},
		{"an editor names a Secret he may not read in env", "  approval:", "    env: [{name: TF_VAR_pw, secretKeyRef: {name: victor-may-not-read, key: password}}]\n  approval:", "spec.terraform.env"},
		{"an editor names a Secret he may not read as the backend's config", "  deletionPolicy: Destroy", "  backend: {configSecretRef: {type: s3, name: victor-may-not-read}}\n  deletionPolicy: Destroy", "spec.backend.configSecretRef"},
	} {
		m := strings.Replace(base, c.from, c.to, 1)
		e.refused(t, "all", c.what, "", m, []string{c.want}, "--as", victor, "apply", "--dry-run=server", "-f", "-")
	}
	e.refused(t, "all", "an editor points a receiver's forge token at a Secret he may not read", "", fmt.Sprintf(`apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRunReceiver
metadata: {name: victor-hooks, namespace: %s}
spec:
  type: Gitea
  secretRef: {name: victor-may-not-read}
  events: [push, pull_request]
  previews: {apiURL: "https://gitea.example.com", tokenSecretRef: {name: victor-may-not-read}}
`, ns), []string{"names Secret victor-may-not-read"}, "--as", victor, "apply", "--dry-run=server", "-f", "-")
	e.refused(t, "all", "an editor points a notifier at a Secret he may not read", "", fmt.Sprintf(`apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRunNotifier
metadata: {name: victor-notes, namespace: %s}
spec: {type: Webhook, secretRef: {name: victor-may-not-read}}
`, ns), []string{"spec.secretRef names Secret victor-may-not-read"}, "--as", victor, "apply", "--dry-run=server", "-f", "-")

	// He writes a module that reads the Secret itself, with the step
	// pod's token and with the state API's: the plan fails, forbidden,
	// and the value is nowhere in the run's status.
	files, _ := json.Marshal(map[string]string{"main.tf": fmt.Sprintf(attackModule, ns, "victor-may-not-read")})
	m := fmt.Sprintf(`apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRun
metadata: {name: victor-module, namespace: %s}
spec:
  engine: job
  source: {inline: {files: %s}}
  approval: {mode: Manual}
  deletionPolicy: Retain
  runner: {workspace: {size: 64Mi}}
`, ns, files)
	if out, err := e.as("", m, e.kubectl, "--as", victor, "apply", "-f", "-"); err != nil {
		t.Fatalf("victor may write runs: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		e.sh(t, "", e.kubectl, "delete", "terraformrun", "victor-module", "-n", ns, "--ignore-not-found", "--wait=false")
	})
	r := e.waitFor(t, "victor-module", "the module's plan to fail", 6*time.Minute, func(r *infrav1.TerraformRun) bool {
		return r.Status.Run != nil && r.Status.Run.Phase == infrav1.RunFailed
	})
	st, _ := json.Marshal(r.Status)
	if strings.Contains(string(st), "hunter2") || strings.Contains(string(st), "0123456789abcdef") {
		t.Fatalf("the Secret's value is in the run's status: %s", st)
	}
	if !strings.Contains(strings.ToLower(string(st)), "forbidden") {
		t.Errorf("victor's module failed, but not on a refused read: %s", st)
	}
	t.Logf("victor's module reading %s: %s", "victor-may-not-read", e.diagnostics(r))
}

// cacheClaimRefused (issue 49, 6): mallory, with edit in the namespace,
// mounts the namespace's provider cache claim in a pod of her own (to
// plant a provider the next run executes), and deletes the claim: both
// refused by opr8r-provider-cache.
func (e *env) cacheClaimRefused(t *testing.T) {
	pod := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: mallory-cache, namespace: %s}
spec:
  containers: [{name: c, image: busybox, command: [sh, -c, "cp /bin/sh /cache/registry.terraform.io"], volumeMounts: [{name: cache, mountPath: /cache}]}]
  volumes: [{name: cache, persistentVolumeClaim: {claimName: opr8r-provider-cache}}]
`, ns)
	e.refused(t, "all", "a tenant's pod mounts the provider cache claim", mallory, pod, []string{"opr8r-provider-cache"}, "apply", "--dry-run=server", "-f", "-")
	e.refused(t, "all", "a tenant deletes the provider cache claim", mallory, "", []string{"opr8r-provider-cache"}, "delete", "pvc", "opr8r-provider-cache", "-n", ns, "--dry-run=server")
}
