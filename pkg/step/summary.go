package step

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxFailureSummary is the longest failure summary, in characters, with
// the words that say where the whole text is.
const MaxFailureSummary = 300

// FailureSummary is what a failed step reports as its message (its
// termination log, or the error result), which becomes the run's
// status.run.message and its history's: text read by people who may not
// read Secrets. It is msg with every registered secret redacted, on one
// line, cut to MaxFailureSummary characters ("…" marks a cut), and it says
// where the whole text is: the step's log, kept in the run's records
// (kubectl tfrun logs). Every step's failure goes through it; the whole
// text goes only to the step's log, redacted like the rest of it.
func (r *Runner) FailureSummary(msg string) string {
	one := strings.Join(strings.Fields(strings.Map(printable, ansi.ReplaceAllString(r.Redact(msg), ""))), " ")
	// A secret printed across lines is whole again on one line.
	one = r.Redact(one)
	if one == "" {
		one = "failed"
	}
	where := r.wholeTextHint()
	room := MaxFailureSummary - utf8.RuneCountInString(where) - 1
	return cutRunes(one, room) + " " + where
}

// wholeTextHint says where the whole text of the step's failure is.
func (r *Runner) wholeTextHint() string {
	k := r.RecordKey
	if k.Run == "" || k.RunID == "" || k.Step == "" {
		return "(whole text: this step's log)"
	}
	h := fmt.Sprintf("(whole text: kubectl tfrun logs %s --run %s --step %s)", k.Run, k.RunID, k.Step)
	if utf8.RuneCountInString(h) > MaxFailureSummary/2 {
		return "(whole text: this step's log, kubectl tfrun logs --step " + k.Step + ")"
	}
	return h
}

// printable keeps printable characters and turns the others (control
// characters, line and paragraph separators) into spaces.
func printable(c rune) rune {
	if unicode.IsPrint(c) {
		return c
	}
	return ' '
}

// cutRunes cuts s to at most n characters, ending it with "…" when cut.
func cutRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	if n < 1 {
		return ""
	}
	rs := []rune(s)
	return string(rs[:n-1]) + "…"
}
