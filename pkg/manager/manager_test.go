package manager

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/engines"
	"github.com/opr8r/opr8r/engines/argo"
	"github.com/opr8r/opr8r/pkg/engine"
)

// pagedWorkflows serves total Workflows, each with a spec and managed
// fields, in pages of the requested limit, and records the options of
// every list.
type pagedWorkflows struct {
	total int
	calls []metav1.ListOptions
}

func (p *pagedWorkflows) list(opts metav1.ListOptions) (runtime.Object, error) {
	p.calls = append(p.calls, opts)
	from := 0
	if opts.Continue != "" {
		var err error
		if from, err = strconv.Atoi(opts.Continue); err != nil {
			return nil, err
		}
	}
	to := p.total
	if opts.Limit > 0 && from+int(opts.Limit) < to {
		to = from + int(opts.Limit)
	}
	l := &wfv1.WorkflowList{ListMeta: metav1.ListMeta{ResourceVersion: "42"}}
	for i := from; i < to; i++ {
		l.Items = append(l.Items, wfv1.Workflow{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("wf-%04d", i), Namespace: "ns",
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "opr8r"}},
				Annotations:   map[string]string{"big": "x"}},
			Spec:   wfv1.WorkflowSpec{Entrypoint: "main", Templates: []wfv1.Template{{Name: "main"}}},
			Status: wfv1.WorkflowStatus{Phase: wfv1.WorkflowRunning},
		})
	}
	if to < p.total {
		l.Continue = strconv.Itoa(to)
		remaining := int64(p.total - to)
		l.RemainingItemCount = &remaining
	}
	return l, nil
}

func TestSlimListReadsPagesAndSlimsEveryObject(t *testing.T) {
	src := &pagedWorkflows{total: 2*listPageSize + 7}
	lw := &slimListWatch{slim: slimmer([]engine.Engine{argo.New()}), inner: toolscache.ToListerWatcherWithContext(&toolscache.ListWatch{
		ListFunc:  src.list,
		WatchFunc: func(metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil },
	})}
	// What a reflector asks for on start: everything, from its watch cache.
	obj, err := lw.ListWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "0", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	if err != nil {
		t.Fatal(err)
	}
	l := obj.(*wfv1.WorkflowList)
	if len(l.Items) != src.total {
		t.Fatalf("listed %d Workflows, want %d", len(l.Items), src.total)
	}
	if l.Continue != "" || l.RemainingItemCount != nil || l.ResourceVersion != "42" {
		t.Fatalf("list meta = %+v, want the first page's resourceVersion and no continue", l.ListMeta)
	}
	for i, wf := range l.Items {
		if want := fmt.Sprintf("wf-%04d", i); wf.Name != want {
			t.Fatalf("item %d is %s, want %s (order kept)", i, wf.Name, want)
		}
		if wf.ManagedFields != nil || wf.Annotations != nil || wf.Spec.Entrypoint != "" || len(wf.Spec.Templates) != 0 {
			t.Fatalf("item %d not slimmed: %+v", i, wf.ObjectMeta)
		}
		if wf.Status.Phase != wfv1.WorkflowRunning {
			t.Fatalf("item %d lost its status", i)
		}
	}
	if len(src.calls) != 3 {
		t.Fatalf("%d list calls, want 3 pages of %d", len(src.calls), listPageSize)
	}
	for i, c := range src.calls {
		if c.Limit != listPageSize || c.ResourceVersion != "" || c.ResourceVersionMatch != "" {
			t.Fatalf("call %d: %+v, want limit %d at the latest resourceVersion", i, c, listPageSize)
		}
	}
}

func TestSecretSelectorCachesOnlyWhatTheManagerReads(t *testing.T) {
	sel := SecretSelector()
	for _, tc := range []struct {
		labels map[string]string
		cached bool
	}{
		{map[string]string{infrav1.ManagedByLabel: infrav1.ManagedByValue, infrav1.ComponentLabel: infrav1.ComponentOutputs}, true},
		{map[string]string{infrav1.ManagedByLabel: infrav1.ManagedByValue, infrav1.ComponentLabel: infrav1.ComponentRawOutputs}, true},
		// The readable plan: up to 1 MiB per run, never read by the manager.
		{map[string]string{infrav1.ManagedByLabel: infrav1.ManagedByValue, infrav1.ComponentLabel: infrav1.ComponentPlan}, false},
		{map[string]string{infrav1.ManagedByLabel: infrav1.ManagedByValue}, false},
		{map[string]string{infrav1.ComponentLabel: infrav1.ComponentOutputs}, false},
		{nil, false},
	} {
		if got := sel.Matches(labels.Set(tc.labels)); got != tc.cached {
			t.Errorf("Secret labelled %v: cached %v, want %v", tc.labels, got, tc.cached)
		}
	}
}

func TestSlimmerDropsManagedFieldsAndLastApplied(t *testing.T) {
	run := &infrav1.TerraformRun{ObjectMeta: metav1.ObjectMeta{Name: "r",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		Annotations:   map[string]string{lastAppliedAnnotation: "{...}", "keep": "me"}}}
	out, err := slimmer(nil)(run)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*infrav1.TerraformRun)
	if got.ManagedFields != nil || got.Annotations[lastAppliedAnnotation] != "" || got.Annotations["keep"] != "me" {
		t.Fatalf("slimmed run = %+v, want no managed fields, no last-applied copy, other annotations kept", got.ObjectMeta)
	}
}

func TestShardSelectsItsRunsAndWhatTheyOwn(t *testing.T) {
	run := func(shard string) labels.Set {
		l := labels.Set{infrav1.ManagedByLabel: infrav1.ManagedByValue}
		if shard != "" {
			l[infrav1.ShardLabel] = shard
		}
		return l
	}
	cases := map[string]struct {
		shard   Shard
		matches map[string]bool // object's shard label -> cached
		wantErr string
		lease   string
	}{
		"no sharding: every run":     {shard: Shard{}, matches: map[string]bool{"": true, "a": true}, lease: "opr8r.infra.opr8r.io"},
		"shard a: its runs only":     {shard: Shard{Name: "a"}, matches: map[string]bool{"": false, "a": true, "b": false}, lease: "opr8r-shard-a.infra.opr8r.io"},
		"unsharded only: unlabelled": {shard: Shard{UnshardedOnly: true}, matches: map[string]bool{"": true, "a": false}, lease: "opr8r.infra.opr8r.io"},
		"both flags: refused":        {shard: Shard{Name: "a", UnshardedOnly: true}, wantErr: "exclude each other"},
		"not a label value: refused": {shard: Shard{Name: "no/slash"}, wantErr: `--shard="no/slash" is not a label value`},
	}
	engines := []engine.Engine{argo.New()}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := tc.shard.Validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Validate() = %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := tc.shard.LeaderElectionID(); got != tc.lease {
				t.Errorf("LeaderElectionID() = %q, want %q", got, tc.lease)
			}
			o := ShardCacheOptions(nil, engines, tc.shard)
			for label, want := range tc.matches {
				sels := map[string]labels.Selector{"children": o.DefaultLabelSelector}
				for obj, by := range o.ByObject {
					switch obj.(type) {
					case *infrav1.TerraformRun:
						sels["runs"] = by.Label
					case *corev1.Secret:
						sels["secrets"] = by.Label
					}
				}
				for what, sel := range sels {
					l := run(label)
					if what == "secrets" {
						l[infrav1.ComponentLabel] = infrav1.ComponentOutputs
					}
					if got := sel.Matches(l); got != want {
						t.Errorf("%s selector %q matches an object with shard %q: %v, want %v", what, sel, label, got, want)
					}
				}
			}
		})
	}
}

// TestRecordedChildrenLeaveTheCache: engine objects labelled settled are
// left out of the main cache (every engine's kinds, the Job engine's pods
// too) and selected by the settled cache, each within its shard.
func TestRecordedChildrenLeaveTheCache(t *testing.T) {
	ours := map[string]string{infrav1.ManagedByLabel: infrav1.ManagedByValue, "infra.opr8r.io/engine": "job"}
	recorded := map[string]string{infrav1.ManagedByLabel: infrav1.ManagedByValue, "infra.opr8r.io/engine": "job", infrav1.SettledLabel: "true"}
	for _, shard := range []Shard{{}, {Name: "a"}} {
		o := ShardCacheOptions(nil, engines.All(), shard)
		sels := map[string]labels.Selector{"default": o.DefaultLabelSelector}
		for obj, by := range o.ByObject {
			if _, ok := obj.(*corev1.Pod); ok {
				sels["pods"] = by.Label
			}
		}
		if len(sels) != 2 {
			t.Fatalf("no pod selector among %v", o.ByObject)
		}
		withShard := func(l map[string]string) labels.Set {
			out := labels.Set{}
			maps.Copy(out, l)
			if shard.Name != "" {
				out[infrav1.ShardLabel] = shard.Name
			}
			return out
		}
		for what, sel := range sels {
			if !sel.Matches(withShard(ours)) || sel.Matches(withShard(recorded)) {
				t.Errorf("shard %q: %s selector %q must take an unrecorded object and leave a recorded one", shard, what, sel)
			}
		}
		rs := SettledSelector(shard)
		if rs.Matches(withShard(ours)) || !rs.Matches(withShard(recorded)) {
			t.Errorf("shard %q: recorded selector %q must take only recorded objects", shard, rs)
		}
		if shard.Name != "" && rs.Matches(labels.Set(recorded)) {
			t.Errorf("shard %q: recorded selector %q takes another shard's objects", shard, rs)
		}
	}
}
