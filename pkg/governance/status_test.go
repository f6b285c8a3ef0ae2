package governance

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

func TestReady(t *testing.T) {
	good := infrav1.ApprovalPolicy{
		Rules:   []infrav1.ApprovalRule{{Name: "destroys", Condition: "plan.destroy > 0", Effect: infrav1.RuleDeny}},
		Windows: []infrav1.ChangeWindow{{Name: "fri", Type: infrav1.WindowDeny, Schedule: "0 12 * * 5", Duration: metav1.Duration{Duration: time.Hour}}},
	}
	for _, c := range []struct {
		name   string
		ap     infrav1.ApprovalPolicy
		status metav1.ConditionStatus
		msg    string
	}{
		{"empty", infrav1.ApprovalPolicy{}, metav1.ConditionTrue, "governs"},
		{"good", good, metav1.ConditionTrue, "governs"},
		{"a rule that does not compile", infrav1.ApprovalPolicy{Rules: []infrav1.ApprovalRule{{Name: "typo", Condition: "plan.destory > 0", Effect: infrav1.RuleDeny}}}, metav1.ConditionFalse, "spec.approval.rules"},
		{"a rule that is not a boolean", infrav1.ApprovalPolicy{Rules: []infrav1.ApprovalRule{{Name: "num", Condition: "plan.destroy", Effect: infrav1.RuleDeny}}}, metav1.ConditionFalse, "num"},
		{"a window that never opens", infrav1.ApprovalPolicy{Windows: []infrav1.ChangeWindow{{Name: "feb30", Type: infrav1.WindowAllow, Schedule: "0 9 30 2 *", Duration: metav1.Duration{Duration: time.Hour}}}}, metav1.ConditionFalse, "spec.approval.windows"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Ready(c.ap, 7)
			if got.Status != c.status || got.ObservedGeneration != 7 || !strings.Contains(got.Message, c.msg) {
				t.Fatalf("got %+v", got)
			}
			if c.status == metav1.ConditionFalse && got.Reason != infrav1.ReasonInvalidSpec {
				t.Fatalf("reason %s", got.Reason)
			}
		})
	}
}
