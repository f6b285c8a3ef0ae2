package argo_test

import (
	"testing"

	"github.com/opr8r/opr8r/engines/argo/argotest"
	"github.com/opr8r/opr8r/engines/enginestest"
)

// TestContract runs the offline engine contract suite on the argo engine.
func TestContract(t *testing.T) { enginestest.Run(t, argotest.Kit()) }
