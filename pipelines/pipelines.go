// Package pipelines lists every engine opr8r ships. It is the one place an
// engine is registered; cmd/ passes the list on and selects the enabled
// ones by flag.
package pipelines

import (
	"github.com/opr8r/opr8r/pipelines/argo"
	"github.com/opr8r/opr8r/pipelines/job"
	"github.com/opr8r/opr8r/pipelines/tekton"
	"github.com/opr8r/opr8r/pkg/engine"
)

// All returns every engine opr8r knows, enabled or not.
func All() []engine.Engine {
	return []engine.Engine{argo.New(), tekton.New(), job.New()}
}
