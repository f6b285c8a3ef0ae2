package controller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// TestOwnWrites: a cached copy older than the manager's own last write is
// behind it until the cache shows that write or a newer one, or until
// ownWriteWait has passed; a run the manager never wrote, or one gone, is
// never behind.
func TestOwnWrites(t *testing.T) {
	at := func(rv string) *infrav1.TerraformRun {
		return &infrav1.TerraformRun{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "db", ResourceVersion: rv}}
	}
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	var w ownWrites
	if w.behind(at("5"), now) {
		t.Fatal("a run the manager never wrote is behind")
	}
	w.wrote(at("120"), now)
	for _, tc := range []struct {
		rv     string
		after  time.Duration
		behind bool
	}{
		{"99", 0, true}, // older: 99 < 120 compared as numbers, not as text
		{"119", time.Second, true},
		{"119", ownWriteWait + time.Second, false}, // waited long enough: forgotten
		{"119", 0, false},                          // and stays forgotten
	} {
		if got := w.behind(at(tc.rv), now.Add(tc.after)); got != tc.behind {
			t.Errorf("cached at %s, %s after the write of 120: behind %v, want %v", tc.rv, tc.after, got, tc.behind)
		}
	}
	for _, caught := range []string{"120", "1000"} {
		w.wrote(at("120"), now)
		if w.behind(at(caught), now) {
			t.Errorf("cached at %s is behind the write of 120", caught)
		}
		if w.behind(at("100"), now) {
			t.Errorf("once the cache showed %s, the write of 120 is still remembered", caught)
		}
	}
	w.wrote(at("120"), now)
	w.forget(client.ObjectKeyFromObject(at("")))
	if w.behind(at("100"), now) {
		t.Error("a forgotten run is behind")
	}
	w.wrote(at("120"), now)
	if w.behind(at("not-a-number"), now) {
		t.Error("a resourceVersion that cannot be compared holds the run back")
	}
}
