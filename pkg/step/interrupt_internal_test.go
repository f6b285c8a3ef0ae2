package step

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A step that is stopped (its --timeout, the pod ending) interrupts
// terraform, as at a terminal, so that it writes its state and releases its
// lock; only one that does not stop within InterruptGrace is killed.
func TestStoppedTerraformIsInterruptedNotKilled(t *testing.T) {
	dir := t.TempDir()
	mark := filepath.Join(dir, "mark")
	script := func(name, onInt string) string {
		p := filepath.Join(dir, name)
		body := "#!/bin/sh\ntrap '" + onInt + "' INT\necho started > " + mark + ".started\nwhile :; do sleep 0.05; done\n"
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	started := func() {
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := os.Stat(mark + ".started"); err == nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatal("the fake terraform never started")
	}

	t.Run("interrupted, it stops by itself", func(t *testing.T) {
		r := &Runner{Terraform: script("tf-stops", "echo state-written > "+mark+"; exit 1"), Out: io.Discard, InterruptGrace: time.Minute}
		ctx, cancel := context.WithCancel(context.Background())
		go func() { started(); cancel() }()
		begin := time.Now()
		_, _, err := r.tf(ctx, dir, true, nil, "apply")
		if err == nil {
			t.Fatal("a stopped terraform reported success")
		}
		b, rerr := os.ReadFile(mark)
		if rerr != nil || strings.TrimSpace(string(b)) != "state-written" {
			t.Fatalf("terraform was not interrupted (SIGINT) before it ended: mark %q, %v", b, rerr)
		}
		if took := time.Since(begin); took > 20*time.Second {
			t.Fatalf("it took %s to stop a terraform that stops when interrupted", took)
		}
	})
	_ = os.Remove(mark + ".started")

	t.Run("one that ignores the interrupt is killed after the grace", func(t *testing.T) {
		r := &Runner{Terraform: script("tf-ignores", ""), Out: io.Discard, InterruptGrace: 500 * time.Millisecond}
		ctx, cancel := context.WithCancel(context.Background())
		go func() { started(); cancel() }()
		begin := time.Now()
		if _, _, err := r.tf(ctx, dir, true, nil, "apply"); err == nil {
			t.Fatal("a killed terraform reported success")
		}
		if took := time.Since(begin); took > 15*time.Second {
			t.Fatalf("a terraform that ignores the interrupt ran %s past a grace of 500ms", took)
		}
	})
}
