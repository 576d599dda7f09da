// Command kubectl-meshnet is kubectl meshnet, the operator's command line
// for meshnet's links: copy it onto PATH and kubectl finds it as a plugin.
package main

import (
	"os"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/meshnet/meshnet/internal/kubectl-meshnet/meshnetctl"
)

func main() {
	// controller-runtime's client logs nothing a user should see; unset,
	// it prints a warning with a stack trace into a long run's output.
	ctrllog.SetLogger(logr.Discard())
	os.Exit(meshnetctl.Main(os.Args[1:], os.Stdout, os.Stderr))
}
