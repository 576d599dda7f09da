// Command kubelet is the upstream node agent, built from the module proxy:
// the real-node tier runs it against containerd on every node.
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	// A nil context panics inside the kubelet.
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
