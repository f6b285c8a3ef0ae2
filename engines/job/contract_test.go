package job_test

import (
	"testing"

	"github.com/opr8r/opr8r/engines/job/jobtest"
	"github.com/opr8r/opr8r/engines/enginestest"
)

// TestContract runs the offline engine contract suite on the job engine.
func TestContract(t *testing.T) { enginestest.Run(t, jobtest.Kit()) }
