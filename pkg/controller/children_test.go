package controller

import (
	"sort"
	"testing"
	"time"

	"github.com/opr8r/opr8r/pkg/names"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

func TestReconcileChildren(t *testing.T) {
	cases := map[string]struct {
		runs        int64            // runs 1..runs exist; the last is status.run
		lastPhase   infrav1.RunPhase // the last run's stored phase
		finishedNow bool             // the last run finished in this pass
		keep        int32
		ttl         *time.Duration
		finishedAgo time.Duration // when every run finished
		lastApplied string        // status.lastApplied's run
		want        []string      // children left
		wantLabel   []string      // children left labelled settled
		wantRequeue time.Duration
	}{
		"keepFinished 3 of 5: the newest three stay": {
			runs: 5, lastPhase: infrav1.RunSucceeded, finishedNow: true, keep: 3, want: []string{"a-3", "a-4", "a-5"}, wantLabel: []string{"a-3", "a-4", "a-5"}, wantRequeue: recordRetry,
		},
		"keepFinished 1: only the latest": {
			runs: 3, lastPhase: infrav1.RunSucceeded, finishedNow: true, keep: 1, want: []string{"a-3"}, wantLabel: []string{"a-3"}, wantRequeue: recordRetry,
		},
		"the latest run finished in this pass: kept and unlabelled until its result is stored; looks again then": {
			runs: 2, lastPhase: infrav1.RunRunning, finishedNow: true, keep: 1, want: []string{"a-2"}, wantRequeue: recordRetry,
		},
		"the pass after: the stored result's child is labelled settled": {
			runs: 2, lastPhase: infrav1.RunSucceeded, keep: 3, want: []string{"a-1", "a-2"}, wantLabel: []string{"a-1", "a-2"},
		},
		"a run in progress: nothing is labelled or pruned": {
			runs: 2, lastPhase: infrav1.RunRunning, keep: 1, want: []string{"a-1", "a-2"},
		},
		"ttl expired: gone once recorded, the latest too": {
			runs: 2, lastPhase: infrav1.RunSucceeded, keep: 3, ttl: ptr.To(time.Minute), finishedAgo: 2 * time.Minute, want: nil,
		},
		"ttl 0s, latest not yet stored: looks again in a second": {
			runs: 1, lastPhase: infrav1.RunRunning, finishedNow: true, keep: 3, ttl: ptr.To(time.Duration(0)), want: []string{"a-1"}, wantRequeue: time.Second,
		},
		"keepFinished 1: the last successful apply's child stays besides (its raw outputs)": {
			runs: 4, lastPhase: infrav1.RunSucceeded, finishedNow: true, keep: 1, lastApplied: "a-2", want: []string{"a-2", "a-4"}, wantLabel: []string{"a-2", "a-4"}, wantRequeue: recordRetry,
		},
		"ttl expired: the last successful apply's child goes too (ttlAfterFinished is the user's choice)": {
			runs: 2, lastPhase: infrav1.RunSucceeded, keep: 3, ttl: ptr.To(time.Minute), finishedAgo: 2 * time.Minute, lastApplied: "a-1", want: nil,
		},
		"ttl not yet expired: requeued for it": {
			runs: 1, lastPhase: infrav1.RunSucceeded, keep: 3, ttl: ptr.To(10 * time.Minute), finishedAgo: 4 * time.Minute, want: []string{"a-1"}, wantLabel: []string{"a-1"}, wantRequeue: 6 * time.Minute,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &fakeEngine{progress: map[string]engine.Progress{}}
			run := aRun("a")
			run.Spec.History.KeepFinished = ptr.To(tc.keep)
			if tc.ttl != nil {
				run.Spec.History.TTLAfterFinished = &metav1.Duration{Duration: *tc.ttl}
			}
			r, _ := newReconciler(t, f)
			run = withRun(r, run, tc.runs, tc.lastPhase, infrav1.RunApply)
			finished := metav1.NewTime(t0.Add(-tc.finishedAgo))
			run.Status.Run.FinishedAt = &finished
			if tc.lastApplied != "" {
				run.Status.LastApplied = &infrav1.AppliedRevision{RunID: tc.lastApplied}
			}
			var objs []client.Object
			for n := int64(1); n <= tc.runs; n++ {
				c := childOf(t, run, infrav1.RunApply, n, run.Status.Run.SpecHash)
				objs = append(objs, c)
				f.progress[c.Name] = engine.Progress{Finished: true, Phase: infrav1.RunSucceeded}
				if n < tc.runs || isTerminal(tc.lastPhase) {
					run.Status.History = append([]infrav1.RunRecord{{ID: c.Name, Number: n, FinishedAt: &finished}}, run.Status.History...)
				}
			}
			r, c := newReconciler(t, f, objs...)
			st := r.newPassState(run)
			st.finished = tc.finishedNow
			res, err := r.reconcileChildren(ctx(), run, st)
			if err != nil {
				t.Fatal(err)
			}
			jobs := &batchv1.JobList{}
			if err := c.List(ctx(), jobs); err != nil {
				t.Fatal(err)
			}
			var left, labelled []string
			for _, j := range jobs.Items {
				left = append(left, j.Name)
				if isSettled(&j) {
					labelled = append(labelled, j.Name)
				}
			}
			sort.Strings(left)
			sort.Strings(labelled)
			if diff := cmp.Diff(tc.want, left); diff != "" {
				t.Errorf("children left (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantLabel, labelled); diff != "" {
				t.Errorf("children labelled settled (-want +got):\n%s", diff)
			}
			if res.RequeueAfter != tc.wantRequeue {
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, tc.wantRequeue)
			}
		})
	}
}

func TestRecordHistory(t *testing.T) {
	run := aRun("a")
	for n := int64(1); n <= 4; n++ {
		cur := &infrav1.RunStatus{ID: names.ChildName("a", infrav1.RunApply, n), Number: n, Type: infrav1.RunApply, Phase: infrav1.RunSucceeded, Commit: "c" + itoa(n)}
		run.Status.Plan = &infrav1.PlanStatus{RunID: cur.ID, Digest: "d" + itoa(n)}
		run.Status.Approval = &infrav1.ApprovalStatus{Digest: "d" + itoa(n), Approved: true, Source: infrav1.ApprovedBySpec}
		appendHistory(run, cur, historyLimits{runs: 3, checks: 3})
		appendHistory(run, cur, historyLimits{runs: 3, checks: 3}) // a retried pass records it once
	}
	var got []string
	for _, h := range run.Status.History {
		got = append(got, h.ID+" "+h.Revision+" "+h.Plan.Digest+" "+string(h.Approval.Source))
	}
	want := []string{"a-4 c4 d4 TerraformRun", "a-3 c3 d3 TerraformRun", "a-2 c2 d2 TerraformRun"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
}
