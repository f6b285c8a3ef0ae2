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
	// spec.runner.serviceAccountName a child used, which must be one of the
	// install's runner service accounts: a name a TerraformRun chose never
	// joins the list): the policies let only their pods' tokens write a
	// listed child's Secrets and results.
	GuardRunnersKey = "runnerServiceAccounts"
)

// guardChild lists a child, and the service accounts its steps run as,
// before it is created.
func (r *TerraformRunReconciler) guardChild(ctx context.Context, ns, child string, runners ...string) error {
	return r.editGuard(ctx, ns, func(g guardList) guardList {
		g.children = appendNew(g.children, child)
		for _, sa := range append(runners, r.Config.RunnerServiceAccount, r.Config.PlanServiceAccount, r.Config.CheckServiceAccount, r.Config.PreviewServiceAccount) {
			if r.Config.IsRunnerAccount(sa) {
				g.runners = appendNew(g.runners, sa)
			}
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

// guardBackoff is how a guard write retries a write another manager (a
// shard, or an old leader) got in first: 8 tries, 20 ms apart and growing
// by half each time, about 0.65 s of waits in all. This manager's own
// passes never conflict with each other: they write one at a time.
var guardBackoff = wait.Backoff{Steps: 8, Duration: 20 * time.Millisecond, Factor: 1.5, Jitter: 0.2}

// guardBatch is a namespace's guard list in this manager: the edits passes
// are waiting to have written, and the list as this manager last wrote it.
type guardBatch struct {
	// write is held by the pass writing the list.
	write sync.Mutex
	// mu guards pending.
	mu      sync.Mutex
	pending []*guardEdit
	// last is the list as this manager last read or wrote it (nil: read
	// it first); only the pass holding write uses it.
	last *corev1.ConfigMap
}

// guardEdit is one pass's edit, and where its result goes.
type guardEdit struct {
	edit func(guardList) guardList
	done chan error
}

func (r *TerraformRunReconciler) guardBatch(ns string) *guardBatch {
	b, _ := r.guardBatches.LoadOrStore(ns, &guardBatch{})
	return b.(*guardBatch)
}

// editGuard changes the namespace's guard list, creating it when needed.
// Passes that edit one namespace's list at the same moment share one
// write (a group commit): a pass queues its edit and takes the write lock;
// whoever holds it applies every queued edit in one update and hands each
// pass its result. With a thousand runs in one namespace, passes that read
// and wrote the list side by side lost 1,374 of 6,784 updates to conflicts
// in make bench-checks; passes that then wrote one at a time each did a
// GET and an UPDATE in turn, and make bench's P1 at 1,000 runs went from
// 20.4 to 29.4 s (5,000 did not finish in 10 minutes). The list this
// manager last wrote is kept, so a write needs no read unless another
// manager wrote in between: a conflict (or a list deleted under it) reads
// it again past the cache (ConfigMaps are not cached) and retries
// (guardBackoff), as does a create that another got in first.
func (r *TerraformRunReconciler) editGuard(ctx context.Context, ns string, edit func(guardList) guardList) error {
	b := r.guardBatch(ns)
	mine := &guardEdit{edit: edit, done: make(chan error, 1)}
	b.mu.Lock()
	b.pending = append(b.pending, mine)
	b.mu.Unlock()

	b.write.Lock()
	b.mu.Lock()
	batch := b.pending
	b.pending = nil
	b.mu.Unlock()
	if len(batch) > 0 {
		// mine is in this batch, or an earlier holder wrote it and
		// handed its result over before letting go of the lock.
		err := r.writeGuard(ctx, ns, b, func(g guardList) guardList {
			for _, e := range batch {
				g = e.edit(g)
			}
			return g
		})
		err = generic("GuardChildren", err, "updating ConfigMap %s/%s, the list of opr8r's children admission guards", ns, GuardConfigMapName)
		for _, e := range batch {
			e.done <- err
		}
	}
	b.write.Unlock()
	return <-mine.done
}

// writeGuard applies edit to the list in one write, with b.write held.
func (r *TerraformRunReconciler) writeGuard(ctx context.Context, ns string, b *guardBatch, edit func(guardList) guardList) error {
	retriable := func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err)
	}
	return retry.OnError(guardBackoff, retriable, func() error {
		cm := b.last
		b.last = nil
		if cm == nil {
			cm = &corev1.ConfigMap{}
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
				if err := r.Create(ctx, cm); err != nil {
					return err
				}
				b.last = cm
				return nil
			}
			if err != nil {
				return err
			}
		}
		g := edit(guardList{children: splitGuard(cm.Data[GuardChildrenKey]), runners: splitGuard(cm.Data[GuardRunnersKey])})
		want := map[string]string{GuardChildrenKey: joinGuard(g.children), GuardRunnersKey: joinGuard(g.runners)}
		if want[GuardChildrenKey] == cm.Data[GuardChildrenKey] && want[GuardRunnersKey] == cm.Data[GuardRunnersKey] {
			b.last = cm
			return nil
		}
		cm = cm.DeepCopy()
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		maps.Copy(cm.Data, want)
		if err := r.Update(ctx, cm); err != nil {
			return err
		}
		b.last = cm
		return nil
	})
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
