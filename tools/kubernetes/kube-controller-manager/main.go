// Command kube-controller-manager is the upstream controller manager, built
// from the module proxy: the real nodes' DaemonSets, Deployments and
// StatefulSets need its controllers.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
