package job_test

import (
	"testing"

	"github.com/opr8r/opr8r/engines/enginestest"
	"github.com/opr8r/opr8r/engines/job/jobtest"
)

// TestContract runs the offline engine contract suite on the job engine.
func TestContract(t *testing.T) { enginestest.Run(t, jobtest.Kit()) }
