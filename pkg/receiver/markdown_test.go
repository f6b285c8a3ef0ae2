package receiver

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/planpolicy"
)

func TestCodeBlock(t *testing.T) {
	cases := map[string]struct {
		in   string
		want string
	}{
		"plain error": {
			in:   "Error: Invalid reference",
			want: "```text\nError: Invalid reference\n```\n",
		},
		"closes the fence, then markdown, a mention and a link": {
			in:   "boom\n```\n@org/admins please [approve](https://evil.example.com) <img src=x onerror=alert(1)>\n```",
			want: "````text\nboom\n```\n@org/admins please [approve](https://evil.example.com) <img src=x onerror=alert(1)>\n```\n````\n",
		},
		"a longer run of backticks": {
			in:   "a `````` b",
			want: "```````text\na `````` b\n```````\n",
		},
		"a tilde fence cannot close a backtick fence": {
			in:   "~~~\n# heading",
			want: "```text\n~~~\n# heading\n```\n",
		},
		"control, bidi and zero-width characters dropped": {
			in:   "a\x1b[31mred\x00\r\u202egnp.exe\u200b\u2028b",
			want: "```text\na[31mred gnp.exeb\n```\n",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, CodeBlock(tc.in, MaxErrorRunes)); diff != "" {
				t.Errorf("CodeBlock (-want +got):\n%s", diff)
			}
		})
	}
	long := CodeBlock(strings.Repeat("é", 5000), MaxErrorRunes)
	if n := utf8.RuneCountInString(long); n > MaxErrorRunes+20 || !utf8.ValidString(long) {
		t.Errorf("a 5000-rune error: %d runes (valid UTF-8 %v), want at most %d and valid", n, utf8.ValidString(long), MaxErrorRunes+20)
	}
}

func TestCodeSpan(t *testing.T) {
	cases := map[string]struct {
		in   string
		want string
	}{
		"an address":                        {in: `aws_s3_bucket.b["logs"]`, want: "` aws_s3_bucket.b[\"logs\"] `"},
		"a backtick leaves a one-tick span": {in: "a.b[\"`@admin`\"]", want: "`` a.b[\"`@admin`\"] ``"},
		"a pipe would split the cell":       {in: `a.b["x|y"]`, want: "` a.b[\"x\\|y\"] `"},
		"a newline would end the row":       {in: "a.b[\"x\n| evil | row |\"]", want: "` a.b[\"x \\| evil \\| row \\|\"] `"},
		"starts and ends with a tick":       {in: "`x`", want: "`` `x` ``"},
		"empty":                             {in: "", want: "` `"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, CodeSpan(tc.in, 300)); diff != "" {
				t.Errorf("CodeSpan (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStatusText(t *testing.T) {
	cases := map[string]struct {
		in   string
		want string
	}{
		"a line":               {in: "plan +1 ~0 -0", want: "plan +1 ~0 -0"},
		"control characters":   {in: "Error:\x1b]8;;https://evil\x07click\u202e", want: "Error:]8;;https://evilclick"},
		"bounded to 140 runes": {in: strings.Repeat("x", 500), want: strings.Repeat("x", MaxStatusRunes-1) + "…"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, StatusText(tc.in)); diff != "" {
				t.Errorf("StatusText (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWord(t *testing.T) {
	for in, want := range map[string]string{"create": "create", "no-op": "no-op", "[x](http://e)": "?", "@admin": "?", "": "?", "Create": "?"} {
		if got := Word(in); got != want {
			t.Errorf("Word(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestPreviewBody: what a pull request's author controls (terraform's
// error, resource addresses) reaches the comment only inside code.
func TestPreviewBody(t *testing.T) {
	hostile := "Error: x\n```\n@org/admins [approve](https://evil.example.com)\n```\n<img src=x>"
	p := &PreviewReporter{}
	run := sealedPreview(t)
	run.Status.Run.Phase = infrav1.RunFailed
	run.Status.Run.Message = hostile
	got := p.body(context.Background(), run, "net", sha, "failure", "")
	want := "**The plan failed** (run ` r1 `, engine argo):\n\n" + CodeBlock(hostile, MaxErrorRunes)
	if !strings.Contains(got, want) {
		t.Errorf("the failed plan's comment:\n%s\nwant it to hold:\n%s", got, want)
	}
	table := changesTable([]planpolicy.ResourceChange{
		{Address: "null_resource.x[\"`|@admin [a](https://e)\n| create | y |\"]", Actions: []string{"create"}},
		{Address: "null_resource.y", Actions: []string{"[x](https://e)"}},
	})
	wantTable := "| action | resource |\n| --- | --- |\n" +
		"| create | `` null_resource.x[\"`\\|@admin [a](https://e) \\| create \\| y \\|\"] `` |\n" +
		"| ? | ` null_resource.y ` |\n\n"
	if diff := cmp.Diff(wantTable, table); diff != "" {
		t.Errorf("changes table (-want +got):\n%s", diff)
	}
}
