package integration

import (
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/gomega"

	"github.com/opr8r/opr8r/test/envtestutil"
)

// checkReliabilityRow checks that docs/reliability.md reports what the test
// measured: a row "| <what> | <figure> |". The document can't drift from the
// tests: a changed figure fails here until the table is updated.
func checkReliabilityRow(what, figure string) { checkDocRow("reliability.md", what, figure) }

// checkDocRow checks that docs/<doc> holds the row "| <what> | <figure> |".
func checkDocRow(doc, what, figure string) {
	b, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), "docs", doc))
	Expect(err).NotTo(HaveOccurred())
	row := "| " + what + " | " + figure + " |"
	Expect(strings.Contains(string(b), row)).To(BeTrue(), "docs/%s must contain the measured row %q", doc, row)
}
