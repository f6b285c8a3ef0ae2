package step

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TerraformTime sums how long terraform itself ran over a step's commands
// (opr8r-step logs it with the step's own time; make bench-e2e reads it).
func TestTerraformTimeSumsTheCommands(t *testing.T) {
	dir := t.TempDir()
	tf := filepath.Join(dir, "tf")
	if err := os.WriteFile(tf, []byte("#!/bin/sh\nsleep 0.3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := &Runner{Terraform: tf, Out: io.Discard}
	if r.TerraformTime() != 0 {
		t.Fatalf("terraform time %s before any command", r.TerraformTime())
	}
	for i := 0; i < 2; i++ {
		if _, _, err := r.tf(context.Background(), dir, true, nil, "plan"); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.TerraformTime(); got < 600*time.Millisecond || got > 10*time.Second {
		t.Fatalf("terraform time %s after two commands of 0.3 s each, want their sum", got)
	}
}
