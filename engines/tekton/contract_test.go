package tekton_test

import (
	"testing"

	"github.com/opr8r/opr8r/engines/enginestest"
	"github.com/opr8r/opr8r/engines/tekton/tektontest"
)

// TestContract runs the offline engine contract suite on the tekton engine.
func TestContract(t *testing.T) { enginestest.Run(t, tektontest.Kit()) }
