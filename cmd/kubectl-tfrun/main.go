// Command kubectl-tfrun is the `kubectl tfrun` plugin: put it on your PATH
// and run `kubectl tfrun --help`.
package main

import (
	"os"

	"github.com/opr8r/opr8r/engines"
	"github.com/opr8r/opr8r/pkg/plugin"
)

func main() { os.Exit(plugin.Main(engines.All())) }
