package tenancy

import (
	"regexp"
	"slices"
	"strings"
)

// SplitList reads a list the policies read: one name per line, blank
// lines ignored.
func SplitList(s string) []string {
	return slices.DeleteFunc(strings.Split(s, "\n"), func(n string) bool { return n == "" })
}

// JoinList writes a list the policies read: sorted, one name per line.
func JoinList(names []string) string {
	names = slices.Clone(names)
	slices.Sort(names)
	return strings.Join(slices.Compact(names), "\n")
}

// childNumberRE is what follows a run's name and a dash in the name of
// one of its children (names.ChildName).
var childNumberRE = regexp.MustCompile(`^((plan|drift|destroy)-)?[0-9]+$`)

// ChildOfRun says whether name is the name of a child of the run: the
// run's name, a dash, and a child number (names.ChildName).
func ChildOfRun(run, name string) bool {
	rest, ok := strings.CutPrefix(name, run+"-")
	return ok && childNumberRE.MatchString(rest)
}
