package controller

import (
	"context"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;update

// The guard list: in every namespace where it runs children, the manager
// keeps the ConfigMap opr8r-guard, whose data key children lists the names
// of its children that may still have pods (one per line). Every object
// made for a child (its pods, TaskRuns, step Jobs, Secrets, ConfigMaps) has
// a name that starts with the child's name and a dash. opr8r's admission
// policies read the list as a parameter (config/policy/runner-guard.yaml):
// where they cannot see the object (a CONNECT to pods/exec sees only the
// pod's name) or where the object does not exist yet (a name squatted
// before opr8r uses it), the name tells them it is opr8r's. A child is
// listed before it is created and dropped once it settled; only the manager
// may write the ConfigMap.
const (
	GuardConfigMapName = "opr8r-guard"
	GuardChildrenKey   = "children"
	// GuardRunnersKey lists the service accounts opr8r's step pods run as
	// in the namespace (the default runner, the checks', and every
	// spec.runner.serviceAccountName a child used): the policies let only
	// their pods' tokens write a listed child's Secrets and results.
	GuardRunnersKey = "runnerServiceAccounts"
)

// guardChild lists a child, and the service accounts its steps run as,
// before it is created.
func (r *TerraformRunReconciler) guardChild(ctx context.Context, ns, child string, runners ...string) error {
	return r.editGuard(ctx, ns, func(g guardList) guardList {
		g.children = appendNew(g.children, child)
		for _, sa := range append(runners, r.Config.RunnerServiceAccount, r.Config.PlanServiceAccount, r.Config.CheckServiceAccount) {
			g.runners = appendNew(g.runners, sa)
		}
		return g
	})
}

// unguardChildren drops the children drop matches from the list.
func (r *TerraformRunReconciler) unguardChildren(ctx context.Context, ns string, drop func(string) bool) error {
	return r.editGuard(ctx, ns, func(g guardList) guardList {
		g.children = slices.DeleteFunc(g.children, drop)
		return g
	})
}

// guardList is what the guard ConfigMap holds.
type guardList struct{ children, runners []string }

func appendNew(list []string, v string) []string {
	if v == "" || slices.Contains(list, v) {
		return list
	}
	return append(list, v)
}

// guardBackoff is how editGuard retries a write another manager (a shard,
// or an old leader) got in first: 8 tries, 20 ms apart and growing by half
// each time, about 0.65 s of waits in all. This manager's own passes never conflict
// with each other: they take the namespace's lock.
var guardBackoff = wait.Backoff{Steps: 8, Duration: 20 * time.Millisecond, Factor: 1.5, Jitter: 0.2}

// guardLock is the lock of the namespace's guard list in this manager.
func (r *TerraformRunReconciler) guardLock(ns string) *sync.Mutex {
	l, _ := r.guardLocks.LoadOrStore(ns, &sync.Mutex{})
	return l.(*sync.Mutex)
}

// editGuard changes the namespace's guard list, creating it when needed;
// it reads past the cache (ConfigMaps are not cached). This manager's
// passes edit one namespace's list one at a time: with a thousand runs in
// one namespace, passes that read and wrote it side by side lost 1,374 of
// 6,784 updates to conflicts in make bench-checks, and a few passes failed
// after five quick retries. A conflict with another manager's write, and a
// create that another got in first (AlreadyExists), are read again and
// retried (guardBackoff).
func (r *TerraformRunReconciler) editGuard(ctx context.Context, ns string, edit func(guardList) guardList) error {
	l := r.guardLock(ns)
	l.Lock()
	defer l.Unlock()
	err := retry.OnError(guardBackoff, func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }, func() error {
		cm := &corev1.ConfigMap{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: GuardConfigMapName}, cm)
		if apierrors.IsNotFound(err) {
			g := edit(guardList{})
			if len(g.children) == 0 {
				return nil
			}
			cm = &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: GuardConfigMapName, Labels: map[string]string{infrav1.ManagedByLabel: infrav1.ManagedByValue}},
				Data:       map[string]string{GuardChildrenKey: joinGuard(g.children), GuardRunnersKey: joinGuard(g.runners)},
			}
			return r.Create(ctx, cm)
		}
		if err != nil {
			return err
		}
		g := edit(guardList{children: splitGuard(cm.Data[GuardChildrenKey]), runners: splitGuard(cm.Data[GuardRunnersKey])})
		want := map[string]string{GuardChildrenKey: joinGuard(g.children), GuardRunnersKey: joinGuard(g.runners)}
		if want[GuardChildrenKey] == cm.Data[GuardChildrenKey] && want[GuardRunnersKey] == cm.Data[GuardRunnersKey] {
			return nil
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		maps.Copy(cm.Data, want)
		return r.Update(ctx, cm)
	})
	return generic("GuardChildren", err, "updating ConfigMap %s/%s, the list of opr8r's children admission guards", ns, GuardConfigMapName)
}

func splitGuard(s string) []string {
	return slices.DeleteFunc(strings.Split(s, "\n"), func(n string) bool { return n == "" })
}

func joinGuard(names []string) string {
	names = slices.Clone(names)
	slices.Sort(names)
	return strings.Join(slices.Compact(names), "\n")
}

// childNumberRE is what follows a run's name and a dash in the name of
// one of its children (names.ChildName).
var childNumberRE = regexp.MustCompile(`^((plan|drift|destroy)-)?[0-9]+$`)

// childOfRun says whether name is the name of a child of the run.
func childOfRun(run, name string) bool {
	rest, ok := strings.CutPrefix(name, run+"-")
	return ok && childNumberRE.MatchString(rest)
}
