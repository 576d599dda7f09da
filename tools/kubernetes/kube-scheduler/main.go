// Command kube-scheduler is the upstream scheduler, built from the module
// proxy, so that pods on the real nodes are placed as on any cluster.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
