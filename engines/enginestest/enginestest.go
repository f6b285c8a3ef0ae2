// Package enginestest lists the test kit of every engine engines.All
// ships, for the shared test suites. Adding an engine adds its kit here.
package enginestest

import (
	"github.com/opr8r/opr8r/engines/argo/argotest"
	"github.com/opr8r/opr8r/engines/job/jobtest"
	"github.com/opr8r/opr8r/engines/tekton/tektontest"
	"github.com/opr8r/opr8r/pkg/engine/enginetest"
)

// Kits returns every engine's test kit, in the order of engines.All.
func Kits() []enginetest.Kit {
	return []enginetest.Kit{argotest.Kit(), tektontest.Kit(), jobtest.Kit()}
}
