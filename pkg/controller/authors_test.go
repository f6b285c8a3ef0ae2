package controller

import (
	"slices"
	"testing"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

func TestAuthors(t *testing.T) {
	cases := map[string]struct {
		annotations map[string]string
		lastApplied int64
		want        []string
	}{
		"every user since the last applied generation, once, sorted": {
			annotations: map[string]string{infrav1.SpecAuthorsAnnotation: "3 carol\n5 alice\n6 bob\n7 alice"}, lastApplied: 4,
			want: []string{"alice", "bob"},
		},
		"a change the last apply included is not this run's": {
			annotations: map[string]string{infrav1.SpecAuthorsAnnotation: "2 alice"}, lastApplied: 2,
		},
		"malformed lines are skipped, a user name may hold spaces": {
			annotations: map[string]string{infrav1.SpecAuthorsAnnotation: "x alice\n9\n9 Jane Doe"},
			want:        []string{"Jane Doe"},
		},
		"without the stamp (no admission policies): the last author": {
			annotations: map[string]string{infrav1.SpecAuthorAnnotation: "dave"}, want: []string{"dave"},
		},
		"nothing stamped: no authors": {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			run := aRun("a")
			run.Annotations = tc.annotations
			run.Status.LastAppliedGeneration = tc.lastApplied
			if got := authors(run); !slices.Equal(got, tc.want) {
				t.Fatalf("authors = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRunAuthorsCountWhoAskedForARerun(t *testing.T) {
	run := aRun("a")
	run.Annotations = map[string]string{infrav1.SpecAuthorsAnnotation: "1 carol", infrav1.RunRequestedByAnnotation: "alice"}
	if got := runAuthors(run, infrav1.TriggerRerunRequest); !slices.Equal(got, []string{"alice", "carol"}) {
		t.Fatalf("a rerun's authors = %q, want the requester with the spec's", got)
	}
	if got := runAuthors(run, infrav1.TriggerSpecChange); !slices.Equal(got, []string{"carol"}) {
		t.Fatalf("a spec change's authors = %q, want the spec's only: the requester asked for an earlier run", got)
	}
	run.Annotations[infrav1.RunRequestedByAnnotation] = "carol"
	if got := runAuthors(run, infrav1.TriggerRerunRequest); !slices.Equal(got, []string{"carol"}) {
		t.Fatalf("authors = %q, want carol once", got)
	}
}
