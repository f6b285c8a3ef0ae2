// Package engines lists every engine opr8r ships. It is the one place an
// engine is registered; cmd/ passes the list on and selects the enabled
// ones by flag.
package engines

import (
	"github.com/opr8r/opr8r/engines/argo"
	"github.com/opr8r/opr8r/engines/job"
	"github.com/opr8r/opr8r/engines/tekton"
	"github.com/opr8r/opr8r/pkg/engine"
)

// All returns every engine opr8r knows, enabled or not.
func All() []engine.Engine {
	return []engine.Engine{argo.New(), tekton.New(), job.New()}
}
