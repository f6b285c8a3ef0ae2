package receiver

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Text taken from a run (terraform's error, resource addresses, the plan's
// summary) is written by whoever wrote the pull request's code: it goes
// into a comment or a status only through these functions, which keep it
// literal text (no markdown, no HTML, no @-mention, no link), bounded in
// length.

// MaxErrorRunes bounds terraform's error in a comment.
const MaxErrorRunes = 2000

// MaxStatusRunes bounds a commit status's description (GitHub takes 140
// characters).
const MaxStatusRunes = 140

// plain is s without control and format characters (newlines and tabs
// kept when multiline, as spaces otherwise; bidi overrides and zero-width
// characters dropped), cut to n runes (an ellipsis marks the cut).
func plain(s string, n int, multiline bool) string {
	var b strings.Builder
	count := 0
	for _, r := range s {
		switch {
		case r == '\n' && multiline:
		case r == '\t' || r == '\n' || r == '\r':
			r = ' '
		case r == utf8.RuneError, unicode.Is(unicode.Cc, r), unicode.Is(unicode.Cf, r),
			unicode.Is(unicode.Zl, r), unicode.Is(unicode.Zp, r):
			continue
		}
		if count == n {
			b.WriteString("…")
			break
		}
		b.WriteRune(r)
		count++
	}
	return b.String()
}

// longestRun is the longest run of c in s.
func longestRun(s string, c rune) int {
	best, cur := 0, 0
	for _, r := range s {
		if r != c {
			cur = 0
			continue
		}
		cur++
		best = max(best, cur)
	}
	return best
}

// CodeBlock is s as a fenced code block that s cannot close: its fence is
// longer than any run of backticks in s (CommonMark: a closing fence is at
// least as long as the opening one), with control characters dropped and
// at most n runes. Nothing inside a code block is markdown, HTML, a
// mention or a link.
func CodeBlock(s string, n int) string {
	s = plain(strings.TrimSpace(s), n, true)
	fence := strings.Repeat("`", max(3, longestRun(s, '`')+1))
	return fence + "text\n" + s + "\n" + fence + "\n"
}

// CodeSpan is s as an inline code span on one line that s cannot close
// (its delimiter is longer than any run of backticks in s), with the
// table's cell separator escaped (GFM tables split cells at | even inside
// code spans), and at most n runes.
func CodeSpan(s string, n int) string {
	s = plain(s, n, false)
	if s == "" {
		return "` `"
	}
	s = strings.ReplaceAll(s, "|", `\|`)
	d := strings.Repeat("`", longestRun(s, '`')+1)
	// A space each side, which CommonMark strips, lets s start or end
	// with a backtick.
	return d + " " + s + " " + d
}

// StatusText is s for a commit status's description: one line, no
// control characters, at most MaxStatusRunes runes. Forges show it as
// text, never as markdown.
func StatusText(s string) string {
	return plain(strings.TrimSpace(s), MaxStatusRunes-1, false)
}

// Word is s when it is one short lowercase word of letters and dashes
// (terraform's actions: create, update, delete, read, no-op), else "?".
func Word(s string) string {
	if s == "" || len(s) > 16 {
		return "?"
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && r != '-' {
			return "?"
		}
	}
	return s
}
