package receiver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// recordAttempts bounds the writes of one delivery that conflict with
// another replica's (or the reconciler's).
const recordAttempts = 5

// receivedPush is what a receiver's status records of a verified event.
func receivedPush(ev Event, body []byte, now time.Time) infrav1.ReceivedPush {
	sum := sha256.Sum256(body)
	p := infrav1.ReceivedPush{
		Delivery: clip(ev.Delivery, 128), Digest: hex.EncodeToString(sum[:]), ReceivedAt: metav1.NewTime(now),
		Event: infrav1.ReceiverEvent(ev.Kind), Ref: ev.Ref, Before: ev.Before, Commit: ev.Commit,
	}
	if len(ev.Repos) > 4 {
		p.Repos = ev.Repos[:4]
	} else {
		p.Repos = ev.Repos
	}
	if ev.FilesKnown && len(ev.Files) <= maxFiles {
		p.Files, p.FilesKnown = ev.Files, true
	}
	return p
}

// maxFiles is the most changed files a pending push keeps; a push that
// changed more plans every run that tracks it.
const maxFiles = 200

// duplicateOf is ErrDuplicate when pushes hold p's delivery or payload.
func duplicateOf(pushes []infrav1.ReceivedPush, p infrav1.ReceivedPush) error {
	_, err := Record(pushes, p, p.ReceivedAt.Time, DefaultDeliveryTTL)
	if err != nil && !errors.Is(err, ErrBacklog) {
		return err
	}
	return nil
}

// record adds p to the receiver's status.pushes in one write, with
// optimistic concurrency: after a conflict it reads the receiver from the
// API server and decides again, so that two replicas taking the same
// delivery record it once. It returns p as recorded (its state).
func (s *Server) record(ctx context.Context, cached *infrav1.TerraformRunReceiver, p infrav1.ReceivedPush) (infrav1.ReceivedPush, error) {
	ttl := s.DeliveryTTL
	if ttl == 0 {
		ttl = DefaultDeliveryTTL
	}
	rcv := cached.DeepCopy()
	for attempt := 1; ; attempt++ {
		pushes, err := Record(rcv.Status.Pushes, p, s.now(), ttl)
		if err != nil {
			return p, err
		}
		rcv.Status.Pushes = pushes
		err = s.Status.Update(ctx, rcv)
		if err == nil {
			return pushes[len(pushes)-1], nil
		}
		if !apierrors.IsConflict(err) || attempt == recordAttempts {
			return p, fmt.Errorf("recording the push in the receiver's status: %w", err)
		}
		if err := s.API.Get(ctx, client.ObjectKeyFromObject(cached), rcv); err != nil {
			return p, fmt.Errorf("reading the receiver after a conflict: %w", err)
		}
	}
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
