// Package pipelinestest lists the test kit of every engine pipelines.All
// ships, for the shared test suites. Adding an engine adds its kit here.
package pipelinestest

import (
	"github.com/opr8r/opr8r/pipelines/argo/argotest"
	"github.com/opr8r/opr8r/pipelines/job/jobtest"
	"github.com/opr8r/opr8r/pipelines/tekton/tektontest"
	"github.com/opr8r/opr8r/pkg/engine/enginetest"
)

// Kits returns every engine's test kit, in the order of pipelines.All.
func Kits() []enginetest.Kit {
	return []enginetest.Kit{argotest.Kit(), tektontest.Kit(), jobtest.Kit()}
}
