package step_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/step"
	"github.com/opr8r/opr8r/pkg/testutil"
)

// TestAwaitApproval: the apply step applies only what the TerraformRun's
// status (written by opr8r's manager alone) records as approved for this
// run; a gate an engine object shows open is not enough. Against a real API
// server.
func TestAwaitApproval(t *testing.T) {
	needKube(t)
	s := runtime.NewScheme()
	if err := infrav1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(testEnv.Config, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	const digest = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	approved := func(d string, ok bool, reason string) *infrav1.ApprovalStatus {
		return &infrav1.ApprovalStatus{Digest: d, Approved: ok, Source: infrav1.ApprovedByApproval, At: metav1.Now(), Reason: reason}
	}
	cases := map[string]struct {
		id       string // status.run.id
		mode     infrav1.ApprovalMode
		approval *infrav1.ApprovalStatus
		later    *infrav1.ApprovalStatus // recorded while the step waits
		wrongUID bool
		want     string // "" to apply, else in the error
	}{
		"approval recorded for this plan and run: applies": {id: "net-1", mode: infrav1.ApprovalManual, approval: approved(digest, true, "")},
		"started without a gate (Auto): applies":           {id: "net-1", mode: infrav1.ApprovalAuto},
		"approval recorded while the step waits: applies":  {id: "net-1", mode: infrav1.ApprovalManual, later: approved(digest, true, "")},
		"nothing recorded (a gate opened in the engine by whoever may write it): refused after the wait": {
			id: "net-1", mode: infrav1.ApprovalManual, want: "records no approval of plan",
		},
		"another plan approved: refused": {id: "net-1", mode: infrav1.ApprovalManual, approval: approved("sha256:22", true, ""), want: "records no approval"},
		"the approval refused by opr8r: refused at once": {
			id: "net-1", mode: infrav1.ApprovalManual, approval: approved(digest, false, "refused: no approval was stamped at admission"), want: "no approval was stamped",
		},
		"the run's current run is another: refused":                {id: "net-2", mode: infrav1.ApprovalAuto, want: "current run is not net-1"},
		"a TerraformRun of the same name but another uid: refused": {id: "net-1", mode: infrav1.ApprovalAuto, wrongUID: true, want: "is not the one this run belongs to"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ns := namespace(t)
			run := testutil.MakeRun("net", ns).Obj()
			if err := c.Create(context.Background(), run); err != nil {
				t.Fatal(err)
			}
			run.Status.Run = &infrav1.RunStatus{ID: tc.id, Type: infrav1.RunApply, Engine: infrav1.EngineJob, SpecHash: "h", Phase: infrav1.RunRunning, ApprovalMode: tc.mode,
				Child: infrav1.ChildReference{APIVersion: "batch/v1", Kind: "Job", Name: tc.id}}
			run.Status.Approval = tc.approval
			if err := c.Status().Update(context.Background(), run); err != nil {
				t.Fatal(err)
			}
			k, err := step.NewKube(kubeconfigPath, ns, nil)
			if err != nil {
				t.Fatal(err)
			}
			var log bytes.Buffer
			r := &step.Runner{Kube: k, Out: &log}
			uid := string(run.UID)
			if tc.wrongUID {
				uid = "another"
			}
			if tc.later != nil {
				go func() {
					time.Sleep(500 * time.Millisecond)
					run.Status.Approval = tc.later
					_ = c.Status().Update(context.Background(), run)
				}()
			}
			err = r.AwaitApproval(context.Background(), step.ApprovalCheck{Run: "net", RunUID: uid, RunID: "net-1", Wait: 3 * time.Second, Poll: 200 * time.Millisecond}, digest)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !errors.Is(err, step.ErrNotApproved) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want ErrNotApproved with %q", err, tc.want)
			}
		})
	}
}
