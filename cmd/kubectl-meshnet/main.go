// Command kubectl-meshnet is kubectl meshnet, the operator's command line
// for meshnet's links: copy it onto PATH and kubectl finds it as a plugin.
package main

import (
	"os"

	"github.com/meshnet/meshnet/internal/meshnetctl"
)

func main() { os.Exit(meshnetctl.Main(os.Args[1:], os.Stdout, os.Stderr)) }
