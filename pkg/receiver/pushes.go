package receiver

import (
	"errors"
	"fmt"
	"slices"
	"time"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// DefaultDeliveryTTL is how long a receiver's status keeps a delivery it
// took (the --webhook-delivery-ttl default): GitHub redelivers for three
// days.
const DefaultDeliveryTTL = 72 * time.Hour

// ErrDuplicate is a delivery whose id or payload the receiver already
// took: a forge's redelivery, or a replay.
var ErrDuplicate = errors.New("duplicate delivery")

// ErrBacklog is a delivery that finds the receiver's status full of pushes
// not yet fanned out: the forge should redeliver later.
var ErrBacklog = errors.New("too many pushes waiting to be fanned out")

// Record adds the delivery p to a receiver's pushes, the decision of the
// webhook server within the forge's request. It returns ErrDuplicate when
// p's digest or delivery id is there already, and ErrBacklog when the list
// is full of pending pushes. Entries that are no longer pending are dropped
// after ttl, and the oldest of them when the list is full. A push older
// than one already handled (see stale) is recorded as PushStale, so that
// it wakes nothing; any other push as PushPending.
func Record(pushes []infrav1.ReceivedPush, p infrav1.ReceivedPush, now time.Time, ttl time.Duration) ([]infrav1.ReceivedPush, error) {
	for _, q := range pushes {
		if q.Digest == p.Digest || (p.Delivery != "" && q.Delivery == p.Delivery) {
			return pushes, fmt.Errorf("%w %s (taken at %s, %s)", ErrDuplicate, deliveryName(q), q.ReceivedAt.UTC().Format(time.RFC3339), q.State)
		}
	}
	// The head each ref reached is kept past the ttl and before any other
	// entry goes when the list is full: without it, a late or replayed old
	// push (after 72 hours, or after a hundred pushes to other branches)
	// relates to nothing recorded and would count as new.
	heads := headsOf(pushes)
	out := slices.DeleteFunc(slices.Clone(pushes), func(q infrav1.ReceivedPush) bool {
		return q.State != infrav1.PushPending && !heads[q.Digest] && now.Sub(q.ReceivedAt.Time) > ttl
	})
	for len(out) >= infrav1.MaxReceivedPushes {
		i := slices.IndexFunc(out, func(q infrav1.ReceivedPush) bool { return q.State != infrav1.PushPending && !heads[q.Digest] })
		if i < 0 {
			i = slices.IndexFunc(out, func(q infrav1.ReceivedPush) bool { return q.State != infrav1.PushPending })
		}
		if i < 0 {
			return pushes, ErrBacklog
		}
		out = slices.Delete(out, i, i+1)
	}
	if p.State == "" {
		p.State = infrav1.PushPending
		if why := stale(out, p); why != "" {
			p.State, p.Message = infrav1.PushStale, why
		}
	}
	return append(out, p), nil
}

// headsOf are the digests of the last push, not stale, of each event, ref
// and repository that some TerraformRun tracks (one still pending, or one
// that woke a run): the pushes to branches nothing tracks (a pull request
// author's own branches) never crowd them out.
func headsOf(pushes []infrav1.ReceivedPush) map[string]bool {
	heads := map[string]bool{}
	for i, p := range pushes {
		if p.State == infrav1.PushStale || p.Commit == "" || (p.State != infrav1.PushPending && p.Woken == 0) {
			continue
		}
		if len(sameRef(pushes[i+1:], p)) == 0 {
			heads[p.Digest] = true
		}
	}
	return heads
}

func deliveryName(q infrav1.ReceivedPush) string {
	if q.Delivery != "" {
		return q.Delivery
	}
	return "with payload digest " + short(q.Digest)
}

// stale says why p is older than the pushes of its ref already recorded
// (and not themselves stale), or "" when it is not: its commit is the head
// they reached, or the commit before one of them. A push whose before is
// that head moves the ref forward, even to a commit seen before (a force
// push back). A push that relates to none of them (a delivery lost, a
// receiver made since) is new: the forge's pushes carry no other order.
func stale(pushes []infrav1.ReceivedPush, p infrav1.ReceivedPush) string {
	if p.Event != infrav1.ReceiverPush && p.Event != infrav1.ReceiverTag || p.Commit == "" {
		return ""
	}
	chain := sameRef(pushes, p)
	if len(chain) == 0 {
		return ""
	}
	head := chain[len(chain)-1].Commit
	switch {
	case p.Before != "" && p.Before == head:
		return ""
	case p.Commit == head:
		return fmt.Sprintf("%s is already at %s", p.Ref, short(p.Commit))
	}
	for _, q := range chain {
		if q.Commit == p.Commit || q.Before == p.Commit {
			return fmt.Sprintf("older than the push of %s to %s: %s was already handled", p.Ref, short(head), short(p.Commit))
		}
	}
	return ""
}

// sameRef are the pushes, not stale, of p's event, ref and repository, in
// the order taken.
func sameRef(pushes []infrav1.ReceivedPush, p infrav1.ReceivedPush) []infrav1.ReceivedPush {
	var out []infrav1.ReceivedPush
	for _, q := range pushes {
		if q.State != infrav1.PushStale && q.Event == p.Event && q.Ref == p.Ref && q.Commit != "" && sameRepo(q.Repos, p.Repos) {
			out = append(out, q)
		}
	}
	return out
}

func sameRepo(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if RepoKey(x) == RepoKey(y) {
				return true
			}
		}
	}
	return false
}

// Behind says whether commit is behind have for the ref of the pushes: a
// commit some chain of pushes recorded before p (not stale) went from, on
// the way to have. A receiver never moves a TerraformRun back to such a
// commit; a push taken after those (a force push back from the head they
// reached, in order) is not behind them.
func Behind(pushes []infrav1.ReceivedPush, p infrav1.ReceivedPush, have string) bool {
	if have == "" || p.Commit == have || (p.Before != "" && p.Before == have) {
		// From have, p moves forward (a force push back included).
		return false
	}
	if i := slices.IndexFunc(pushes, func(q infrav1.ReceivedPush) bool { return q.Digest == p.Digest }); i >= 0 {
		pushes = pushes[:i]
	}
	chain := sameRef(pushes, p)
	seen := map[string]bool{}
	for at := have; at != "" && !seen[at]; {
		seen[at] = true
		i := lastIndex(chain, at)
		if i < 0 {
			return false
		}
		at = chain[i].Before
		if at == p.Commit {
			return true
		}
	}
	return false
}

// lastIndex is the index of the last push of chain to commit, or -1.
func lastIndex(chain []infrav1.ReceivedPush, commit string) int {
	for i := len(chain) - 1; i >= 0; i-- {
		if chain[i].Commit == commit {
			return i
		}
	}
	return -1
}
