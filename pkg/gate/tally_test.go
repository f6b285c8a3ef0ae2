package gate

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

func TestTally(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	ok := func(user string, min int, groups ...string) Vote {
		return Vote{User: user, Groups: groups, Approve: true, Source: "TerraformRunApproval/" + user, At: t0.Add(time.Duration(min) * time.Minute)}
	}
	no := func(user string, min int, groups ...string) Vote {
		v := ok(user, min, groups...)
		v.Approve, v.Reason = false, "no by "+user
		return v
	}
	quorum2 := infrav1.ApprovalSpec{RequiredApprovals: 2}
	cases := []struct {
		name       string
		ap         infrav1.ApprovalSpec
		authors    []string
		votes      []Vote
		approvedBy []string
		needed     int32
		rejectedBy string // the rejecting vote's user, "" for none
		ignored    []string
	}{
		{name: "one approval is the default rule", votes: []Vote{ok("alice", 1)}, approvedBy: []string{"alice"}},
		{name: "no votes wait", ap: quorum2, needed: 2},
		{name: "a quorum of two distinct users", ap: quorum2, votes: []Vote{ok("alice", 1), ok("bob", 2)}, approvedBy: []string{"alice", "bob"}},
		{name: "one user twice is one approval", ap: quorum2, votes: []Vote{ok("alice", 1), ok("alice", 2)}, approvedBy: []string{"alice"}, needed: 1},
		{name: "the author is barred from approving", ap: infrav1.ApprovalSpec{RequiredApprovals: 2, SelfApproval: infrav1.SelfApprovalForbidden}, authors: []string{"alice"},
			votes: []Vote{ok("alice", 1), ok("bob", 2)}, approvedBy: []string{"bob"}, needed: 1, ignored: []string{"alice: an author of the change may not approve it"}},
		{name: "every author since the last apply is barred: a colleague's edit does not launder the change", ap: infrav1.ApprovalSpec{SelfApproval: infrav1.SelfApprovalForbidden}, authors: []string{"alice", "carol"},
			votes: []Vote{ok("alice", 1), ok("carol", 2)}, needed: 1, ignored: []string{"alice: an author of the change may not approve it", "carol: an author of the change may not approve it"}},
		{name: "the author may still reject", ap: infrav1.ApprovalSpec{SelfApproval: infrav1.SelfApprovalForbidden}, authors: []string{"alice"},
			votes: []Vote{no("alice", 1)}, needed: 1, rejectedBy: "alice"},
		{name: "an unknown author bars every approval under Forbidden", ap: infrav1.ApprovalSpec{SelfApproval: infrav1.SelfApprovalForbidden},
			votes: []Vote{ok("bob", 1)}, needed: 1, ignored: []string{"bob: the change has no stamped author"}},
		{name: "a user not listed is ignored and reported", ap: infrav1.ApprovalSpec{Approvers: &infrav1.Approvers{Users: []string{"bob"}}},
			votes: []Vote{ok("mallory", 1)}, needed: 1, ignored: []string{"mallory: not in spec.approval.approvers"}},
		{name: "a listed group counts", ap: infrav1.ApprovalSpec{Approvers: &infrav1.Approvers{Groups: []string{"sre"}}},
			votes: []Vote{ok("carol", 1, "devs", "sre")}, approvedBy: []string{"carol"}},
		{name: "a rejection by a user not listed does not reject", ap: infrav1.ApprovalSpec{Approvers: &infrav1.Approvers{Users: []string{"bob"}}},
			votes: []Vote{no("mallory", 1), ok("bob", 2)}, approvedBy: []string{"bob"}, ignored: []string{"mallory: not in spec.approval.approvers"}},
		{name: "one rejection rejects, even after a quorum", ap: quorum2, votes: []Vote{ok("alice", 1), ok("bob", 2), no("carol", 3)},
			approvedBy: []string{"alice", "bob"}, rejectedBy: "carol"},
		{name: "a Quorum rejection needs the quorum", ap: infrav1.ApprovalSpec{RequiredApprovals: 2, Rejection: infrav1.RejectByQuorum},
			votes: []Vote{no("alice", 1), ok("bob", 2)}, approvedBy: []string{"bob"}, needed: 1},
		{name: "a Quorum rejection met", ap: infrav1.ApprovalSpec{RequiredApprovals: 2, Rejection: infrav1.RejectByQuorum},
			votes: []Vote{no("alice", 1), no("bob", 2)}, needed: 2, rejectedBy: "alice"},
		{name: "a user's newest decision counts", ap: quorum2, votes: []Vote{no("alice", 1), ok("alice", 2), ok("bob", 3)}, approvedBy: []string{"alice", "bob"}},
		{name: "a user who approves then rejects rejects", votes: []Vote{ok("alice", 1), no("alice", 2)}, needed: 1, rejectedBy: "alice"},
		{name: "decisions of the same second are ordered by user", ap: quorum2, votes: []Vote{ok("bob", 1), ok("alice", 1)}, approvedBy: []string{"alice", "bob"}},
		{name: "a user's approval and rejection in the same second reject", votes: []Vote{no("alice", 1), ok("alice", 1)}, needed: 1, rejectedBy: "alice"},
		{name: "an unstamped approval counts under the default rule", votes: []Vote{ok("", 1)}, approvedBy: []string{""}},
		{name: "an unstamped approval does not count for a quorum", ap: quorum2, votes: []Vote{ok("", 1), ok("bob", 2)},
			approvedBy: []string{"bob"}, needed: 1, ignored: []string{": no user was stamped"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, rej := tally(tc.ap, tc.authors, "sha256:d", tc.votes)
			if diff := cmp.Diff(tc.approvedBy, got.ApprovedBy); diff != "" {
				t.Errorf("approvedBy (-want +got):\n%s", diff)
			}
			if got.Needed != tc.needed {
				t.Errorf("needed = %d, want %d", got.Needed, tc.needed)
			}
			switch {
			case tc.rejectedBy == "" && rej != nil:
				t.Errorf("rejected by %q, want not rejected", rej.User)
			case tc.rejectedBy != "" && (rej == nil || rej.User != tc.rejectedBy):
				t.Errorf("rejection = %+v, want by %q", rej, tc.rejectedBy)
			}
			var ignored []string
			for _, ig := range got.Ignored {
				ignored = append(ignored, ig.User+": "+ig.Reason)
			}
			if len(ignored) != len(tc.ignored) {
				t.Fatalf("ignored = %q, want %q", ignored, tc.ignored)
			}
			for i := range ignored {
				if !strings.HasPrefix(ignored[i], tc.ignored[i]) {
					t.Errorf("ignored[%d] = %q, want prefix %q", i, ignored[i], tc.ignored[i])
				}
			}
			if want := len(tc.approvedBy); got.Summary != strconv.Itoa(want)+"/"+strconv.Itoa(int(Required(tc.ap))) {
				t.Errorf("summary = %q", got.Summary)
			}
		})
	}
}

// Once the approval deadline passed, approvals cast after it no longer
// count, and every rejection still does: a deadline bounds approvals,
// never rejections.
func TestDropLateApprovals(t *testing.T) {
	deadline := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	early, late := deadline.Add(-time.Minute), deadline.Add(time.Minute)
	approve := func(user string, at time.Time) Vote {
		return Vote{User: user, Approve: true, Source: "TerraformRunApproval/" + user, At: at}
	}
	reject := func(user string, at time.Time) Vote {
		return Vote{User: user, Source: "TerraformRunApproval/" + user, At: at}
	}
	specReject := Vote{User: "bob", Source: "spec.approval.rejectedPlan"}
	specApprove := Vote{User: "bob", Approve: true, Source: "spec.approval.approvedPlan"}
	cases := map[string]struct {
		votes []Vote
		want  []Vote
	}{
		"an approval cast before the deadline is kept": {
			votes: []Vote{approve("alice", early)}, want: []Vote{approve("alice", early)},
		},
		"an approval cast at the deadline is kept": {
			votes: []Vote{approve("alice", deadline)}, want: []Vote{approve("alice", deadline)},
		},
		"an approval cast after the deadline is dropped": {
			votes: []Vote{approve("alice", early), approve("bob", late)}, want: []Vote{approve("alice", early)},
		},
		"a rejection cast after the deadline is kept": {
			votes: []Vote{approve("alice", early), reject("bob", late)}, want: []Vote{approve("alice", early), reject("bob", late)},
		},
		"spec.approval.rejectedPlan, which has no time, is kept": {
			votes: []Vote{approve("alice", early), specReject}, want: []Vote{approve("alice", early), specReject},
		},
		"spec.approval.approvedPlan, which has no time, is dropped": {
			votes: []Vote{specApprove}, want: nil,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := dropLateApprovals(tc.votes, deadline)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("dropLateApprovals (-want +got):\n%s", diff)
			}
		})
	}
}
