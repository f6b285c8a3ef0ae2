package step

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// MaxCheckOutput is how much of a check's output its Secret keeps: the
// end of it, where tools print their verdict.
const MaxCheckOutput = 256 << 10

// CheckOptions configures one of spec.checks.
type CheckOptions struct {
	// Name is the check's name.
	Name string
	// Dir is the working directory (the module's directory).
	Dir string
	// PlanJSON is the plan file the plan step wrote for the checks; the
	// check does not start without it.
	PlanJSON string
	// OutputSecret receives the check's output, when set.
	OutputSecret string
	// Command is the user's command and arguments.
	Command []string
}

// Check runs a user's check of the plan. Its combined output is streamed
// to the step's log and its end kept in OutputSecret; a non-zero exit is an
// error whose text is the output's last line and the exit code, which the
// run's status shows.
func (r *Runner) Check(ctx context.Context, o CheckOptions) error {
	if len(o.Command) == 0 {
		return errors.New("check " + o.Name + " has no command")
	}
	if o.PlanJSON != "" {
		if _, err := os.Stat(o.PlanJSON); err != nil {
			return fmt.Errorf("check %s: the plan step wrote no %s: %w", o.Name, o.PlanJSON, err)
		}
	}
	tail := &tailBuffer{max: MaxCheckOutput}
	cmd := exec.CommandContext(ctx, o.Command[0], o.Command[1:]...)
	cmd.Dir = o.Dir
	if st, err := os.Stat(o.Dir); o.Dir == "" || err != nil || !st.IsDir() {
		cmd.Dir = ""
	}
	cmd.Stdout = io.MultiWriter(r.Out, tail)
	cmd.Stderr = cmd.Stdout
	r.logf("check %s: %s", o.Name, strings.Join(o.Command, " "))
	runErr := cmd.Run()
	code := 0
	var exitErr *exec.ExitError
	switch {
	case errors.As(runErr, &exitErr):
		code = exitErr.ExitCode()
	case runErr != nil:
		// The command could not start (not found, not executable).
		code = -1
		fmt.Fprintf(tail, "%v\n", runErr)
	}
	verdict := "passed"
	if code != 0 {
		verdict = "failed"
	}
	if err := r.keepCheckOutput(ctx, o, tail.Bytes(), verdict, code); err != nil {
		return err
	}
	r.logf("check %s %s (exit code %d)", o.Name, verdict, code)
	if code == 0 {
		return nil
	}
	last := LastLine(tail.String())
	if last == "" {
		last = "no output"
	}
	if code < 0 {
		return fmt.Errorf("%s (the command did not start)", last)
	}
	return fmt.Errorf("%s (exit code %d)", last, code)
}

// keepCheckOutput writes the check's output Secret, create only: a check
// runs as opr8r-check, which reads and changes no Secret, and a retried
// check keeps the first attempt's output.
func (r *Runner) keepCheckOutput(ctx context.Context, o CheckOptions, output []byte, verdict string, code int) error {
	if o.OutputSecret == "" || r.Kube == nil {
		return nil
	}
	data := map[string][]byte{
		"output.txt": output,
		"result":     []byte(verdict),
		"exit-code":  []byte(strconv.Itoa(code)),
		"command":    []byte(strings.Join(o.Command, " ")),
	}
	err := r.Kube.CreateSecret(ctx, o.OutputSecret, infrav1.ComponentCheck, data)
	if apierrors.IsAlreadyExists(err) {
		r.logf("check %s: %v", o.Name, err)
		return nil
	}
	return err
}

// LastLine is the last non-blank line of output, without colour codes.
func LastLine(out string) string {
	lines := strings.Split(ansi.ReplaceAllString(out, ""), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return truncate(l, 1000)
		}
	}
	return ""
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	buf       bytes.Buffer
	max       int
	truncated bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf.Write(p)
	if over := t.buf.Len() - t.max; over > 0 {
		t.truncated = true
		t.buf.Next(over)
		rest := append([]byte{}, t.buf.Bytes()...)
		t.buf.Reset()
		t.buf.Write(rest)
	}
	return len(p), nil
}

// Bytes is what was kept, marked when the start was dropped.
func (t *tailBuffer) Bytes() []byte {
	if !t.truncated {
		return t.buf.Bytes()
	}
	return append([]byte("[opr8r: the start of the output was dropped; the whole output is in the step's log]\n"), t.buf.Bytes()...)
}

func (t *tailBuffer) String() string { return t.buf.String() }
