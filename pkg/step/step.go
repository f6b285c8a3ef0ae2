// Package step is what runs inside each pipeline step: fetching the source,
// terraform init, plan, apply, export of outputs and cleanup. cmd/opr8r-step
// exposes each as a subcommand; both engines invoke the same subcommands.
//
// Secrets arrive as mounted files. Their values are read into memory, passed
// to terraform through the environment of its own process or through files
// in a private temporary directory, and registered, with every form they may
// be printed in (SecretForms), before terraform runs. They are redacted from
// everything the step prints and from its failure summary (FailureSummary),
// which is short and says where the whole text is. The plan as JSON that
// people and checks read is masked (MaskPlanJSON); the plan in clear is a
// record of its own.
package step

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/opr8r/opr8r/pkg/records"
)

// DefaultInterruptGrace is how long an interrupted terraform may take to
// stop before it is killed; the engines end a step's pod a minute after it
// (pipeline.StopGrace).
const DefaultInterruptGrace = 4 * time.Minute

// DefaultLockTimeout is how long a step waits for the state lock: longer
// than a plan of a large module usually holds it, and well inside the
// steps' own timeouts (spec.timeouts, at least a minute of which a wait
// takes at most this much).
const DefaultLockTimeout = 5 * time.Minute

// lockTimeoutArg is terraform's -lock-timeout for the runner, or
// -lock=false for a step that reads the state without its lock.
func (r *Runner) lockTimeoutArg() string {
	if r.NoStateLock {
		return "-lock=false"
	}
	d := r.LockTimeout
	if d <= 0 {
		d = DefaultLockTimeout
	}
	return "-lock-timeout=" + d.String()
}

// Runner holds what every step needs.
type Runner struct {
	// NoStateLock plans without the state lock (-lock=false) and never
	// creates a workspace: a preview, which reads the tracked run's state
	// and may not write it or hold its lock (--no-state-lock).
	NoStateLock bool
	// Terraform is the terraform or tofu binary; empty finds terraform,
	// then tofu, on PATH.
	Terraform string
	// Out receives the step's log (terraform's output, redacted).
	Out io.Writer
	// ResultsDir receives small results, one file per result.
	ResultsDir string
	// ResultsFile, when set instead, receives all small results as one JSON
	// object (the termination log of a plain Job's container).
	ResultsFile string
	// Env is extra environment for terraform (from --env-file).
	Env map[string]string
	// Kube writes Secrets and reads Leases; nil when no step needs it.
	Kube *Kube
	// Records keeps the step's log and the plans for people after the
	// run's pods are gone; nil keeps nothing.
	Records records.Store
	// RecordKey names this step's records (its Kind is set per record).
	RecordKey records.Key
	// StateRetry is how long apply keeps trying to save a state its
	// backend did not take (0: DefaultStateRetry).
	StateRetry time.Duration
	// LockTimeout is how long a terraform command that takes the state
	// lock waits for it when another holds it (0: DefaultLockTimeout): a
	// scheduled check, a preview or a colleague's terraform plan holding
	// the lock makes an apply or a destroy wait, never fail at once.
	LockTimeout time.Duration
	// InterruptGrace is how long an interrupted terraform (its step's
	// --timeout, or the pod stopped) is given to stop and write its state
	// before it is killed (0: DefaultInterruptGrace).
	InterruptGrace time.Duration
	// KeptStates keeps a state the backend did not take as a record of
	// the TerraformRun (apply), and restore-state pushes the ones earlier
	// runs kept; nil: the state stays in the workspace's errored.tfstate.
	KeptStates *StateKeeper
	// PluginCacheInWorkspace says the plugin cache (TF_PLUGIN_CACHE_DIR)
	// is the run's own, in its workspace: init leaves terraform's links
	// into it. Otherwise (the default) it is taken as the namespace's
	// shared cache, which every run's init writes: init copies the
	// packages terraform linked from it into the module, checks them
	// against the lock file, and installs without the cache when
	// anything about it fails.
	PluginCacheInWorkspace bool
	// CacheLockWait is how long init waits for the shared plugin cache's
	// lock before installing without the cache (0: DefaultCacheLockWait).
	CacheLockWait time.Duration
	// StopSignal is what a stopped terraform is sent first (nil: SIGINT);
	// tests send SIGKILL to play a pod that dies at once.
	StopSignal os.Signal

	// secrets are the registered secrets and their forms (AddSecret),
	// known the same as a set; replacers redact them, by replacement,
	// built again when a secret is added.
	secrets   []string
	known     map[string]bool
	replacers map[string]*strings.Replacer
	mu        sync.Mutex
	// tfTime is how long terraform itself ran in this step (TerraformTime).
	tfTime time.Duration
}

// TerraformTime is how long terraform itself ran in this step, summed over
// its commands: the rest of a step's time is opr8r-step's own.
func (r *Runner) TerraformTime() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tfTime
}

// LoadEnvFiles reads NAME=PATH pairs: each file's content becomes the
// variable NAME in terraform's environment, and a secret to redact in all
// its forms (AddSecret).
func (r *Runner) LoadEnvFiles(pairs []string) error {
	for _, p := range pairs {
		name, path, ok := strings.Cut(p, "=")
		if !ok || name == "" || path == "" {
			return fmt.Errorf("--env-file %q: want NAME=PATH", p)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("--env-file %s: %w", name, err)
		}
		if r.Env == nil {
			r.Env = map[string]string{}
		}
		v := strings.TrimRight(string(b), "\r\n")
		r.Env[name] = v
		r.AddSecret(v)
	}
	return nil
}

// WriteResult writes one small result.
func (r *Runner) WriteResult(name, value string) error {
	if r.ResultsFile != "" {
		return r.writeResultJSON(name, value)
	}
	if r.ResultsDir == "" {
		return nil
	}
	if err := os.MkdirAll(r.ResultsDir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(r.ResultsDir, name), []byte(value), 0o644)
}

// writeResultJSON adds one result to the JSON object in ResultsFile.
func (r *Runner) writeResultJSON(name, value string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	vals := map[string]string{}
	if b, err := os.ReadFile(r.ResultsFile); err == nil && len(bytes.TrimSpace(b)) > 0 {
		// A file that is not a results object (a fresh termination log) is
		// started over.
		_ = json.Unmarshal(b, &vals)
	}
	vals[name] = value
	b, err := json.Marshal(vals)
	if err != nil {
		return err
	}
	return os.WriteFile(r.ResultsFile, b, 0o644)
}

func (r *Runner) logf(format string, args ...any) {
	fmt.Fprintln(r.Out, r.Redact(fmt.Sprintf("opr8r-step: "+format, args...)))
}

func (r *Runner) terraformBin() (string, error) {
	if r.Terraform != "" {
		return r.Terraform, nil
	}
	for _, b := range []string{"terraform", "tofu"} {
		if p, err := exec.LookPath(b); err == nil {
			return p, nil
		}
	}
	return "", errors.New("neither terraform nor tofu is on PATH; use a Terraform or OpenTofu image")
}

// envValue is what terraform sees for key: r.Env wins over the process's.
func (r *Runner) envValue(key string) string {
	if v, ok := r.Env[key]; ok {
		return v
	}
	return os.Getenv(key)
}

// TerraformError is a failed terraform command, with terraform's own
// diagnostic summary.
type TerraformError struct {
	Args    []string
	Code    int
	Summary string
	// Errors are every error diagnostic terraform printed, one line each
	// ("Error: <summary>: <detail>"); Summary is the first.
	Errors []string
}

func (e *TerraformError) Error() string {
	if e.Summary != "" {
		return e.Summary
	}
	return fmt.Sprintf("terraform %s exited with code %d", strings.Join(e.Args, " "), e.Code)
}

// tf runs terraform in dir. Its combined output is streamed, redacted, to
// r.Out unless quiet; stdout is also returned. A non-zero exit that is not
// listed in okCodes is a *TerraformError carrying the diagnostic summary.
func (r *Runner) tf(ctx context.Context, dir string, quiet bool, okCodes []int, args ...string) ([]byte, int, error) {
	bin, err := r.terraformBin()
	if err != nil {
		return nil, 0, err
	}
	// Terraform only warns, on every command, when its plugin cache
	// directory is missing; the workspace volume starts empty.
	if d := r.envValue("TF_PLUGIN_CACHE_DIR"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, 0, fmt.Errorf("creating the plugin cache %s: %w", d, err)
		}
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	// Stopped (the step's timeout, the pod ending), terraform is
	// interrupted as at a terminal: it stops what it runs, writes its state
	// and releases its lock. Killing it would lose the state of resources
	// it just created.
	cmd.Cancel = func() error { return cmd.Process.Signal(cmp.Or(r.StopSignal, os.Interrupt)) }
	cmd.WaitDelay = cmp.Or(r.InterruptGrace, DefaultInterruptGrace)
	cmd.Dir = dir
	cmd.Env = os.Environ()
	for k, v := range r.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	errLog := &redactingWriter{r: r, w: r.Out}
	cmd.Stderr = io.MultiWriter(&stderr, errLog)
	var outLog *redactingWriter
	if !quiet {
		outLog = &redactingWriter{r: r, w: r.Out}
		cmd.Stdout = io.MultiWriter(&stdout, outLog)
		r.logf("%s %s", filepath.Base(bin), strings.Join(args, " "))
	}
	began := time.Now()
	err = cmd.Run()
	r.mu.Lock()
	r.tfTime += time.Since(began)
	r.mu.Unlock()
	// A last line without a newline is still logged (redacted).
	errLog.Flush()
	if outLog != nil {
		outLog.Flush()
	}
	code := 0
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		code = exitErr.ExitCode()
	} else if err != nil {
		return nil, 0, err
	}
	if code == 0 || slices.Contains(okCodes, code) {
		return stdout.Bytes(), code, nil
	}
	return stdout.Bytes(), code, r.terraformError(args, code, stderr.String()+"\n"+stdout.String())
}

// terraformError is a failed command's error: its diagnostics (redacted),
// the first as the summary.
func (r *Runner) terraformError(args []string, code int, output string) *TerraformError {
	diags := diagnostics(output)
	for i := range diags {
		diags[i] = r.Redact(diags[i])
	}
	te := &TerraformError{Args: args, Code: code, Errors: diags}
	if len(diags) > 0 {
		te.Summary = diags[0]
	}
	return te
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;]*m`)

// DiagnosticSummary returns terraform's first error diagnostic as one line,
// "Error: <summary>: <detail>". In terraform's output (with or without the
// box drawing of colour mode) the source excerpt under a diagnostic is
// indented and the detail prose is not, so the detail is the first
// unindented line after the summary.
func DiagnosticSummary(out string) string {
	if d := diagnostics(out); len(d) > 0 {
		return d[0]
	}
	return ""
}

// diagnostics returns every error diagnostic in terraform's output as one
// line each (see DiagnosticSummary), in order.
func diagnostics(out string) []string {
	var lines []string
	for _, l := range strings.Split(ansi.ReplaceAllString(out, ""), "\n") {
		l = strings.TrimRight(l, " \r")
		switch {
		case l == "╷" || l == "╵":
			continue
		case strings.HasPrefix(l, "│ "):
			l = l[len("│ "):]
		case l == "│":
			l = ""
		}
		lines = append(lines, l)
	}
	var out2 []string
	for i, l := range lines {
		if !strings.HasPrefix(l, "Error: ") {
			continue
		}
		summary := l
		for _, d := range lines[i+1:] {
			if strings.HasPrefix(d, "Error: ") || strings.HasPrefix(d, "Warning: ") {
				break
			}
			if d == "" || d[0] == ' ' || d[0] == '\t' {
				continue
			}
			summary += ": " + d
			break
		}
		out2 = append(out2, truncate(summary, 1000))
	}
	return out2
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// redactingWriter redacts secrets line by line before writing.
type redactingWriter struct {
	r   *Runner
	w   io.Writer
	buf []byte
}

func (rw *redactingWriter) Write(p []byte) (int, error) {
	rw.buf = append(rw.buf, p...)
	for {
		i := bytes.IndexByte(rw.buf, '\n')
		if i < 0 {
			break
		}
		if _, err := io.WriteString(rw.w, rw.r.Redact(string(rw.buf[:i+1]))); err != nil {
			return 0, err
		}
		rw.buf = rw.buf[i+1:]
	}
	return len(p), nil
}

// Flush writes a trailing partial line, ended with a newline so that it
// does not run into the next output.
func (rw *redactingWriter) Flush() {
	if len(rw.buf) > 0 {
		_, _ = io.WriteString(rw.w, rw.r.Redact(string(rw.buf))+"\n")
		rw.buf = nil
	}
}

// KeepRecord stores one of the step's records, when the step keeps any.
func (r *Runner) KeepRecord(ctx context.Context, kind records.Kind, data []byte) error {
	if r.Records == nil {
		return nil
	}
	k := r.RecordKey
	k.Kind = kind
	return r.Records.Put(ctx, k, data)
}

// MaxKeptLog is the most of a step's log kept as its record; the rest is
// cut with a marker (the pod's log, while it exists, has it all).
const MaxKeptLog = 16 << 20

// LogCapture keeps what a step prints, up to MaxKeptLog bytes, for its
// log record. It receives the step's output after redaction.
type LogCapture struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	over int64
}

func (c *LogCapture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := MaxKeptLog - c.buf.Len(); room < len(p) {
		c.buf.Write(p[:max(room, 0)])
		c.over += int64(len(p) - max(room, 0))
		return len(p), nil
	}
	c.buf.Write(p)
	return len(p), nil
}

// Bytes returns the captured log, with a marker when it was cut.
func (c *LogCapture) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := append([]byte{}, c.buf.Bytes()...)
	if c.over > 0 {
		b = append(b, fmt.Sprintf("\n... [opr8r: log cut: %d more bytes are only in the pod's log]\n", c.over)...)
	}
	return b
}
