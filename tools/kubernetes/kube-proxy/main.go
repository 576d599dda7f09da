// Command kube-proxy is the upstream service proxy, built from the module
// proxy: pods on the real nodes reach the API server through the
// kubernetes Service's ClusterIP, as on any cluster.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() {
	os.Exit(cli.Run(app.NewProxyCommand()))
}
