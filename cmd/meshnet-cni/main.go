// Command meshnet-cni is meshnet's CNI plugin: it hands each CNI command to
// the node's meshnetd. meshnetd installs it as /opt/cni/bin/meshnet.
package main

import (
	"github.com/containernetworking/cni/pkg/skel"
	cniversion "github.com/containernetworking/cni/pkg/version"

	"github.com/meshnet/meshnet/internal/cniplugin"
	"github.com/meshnet/meshnet/internal/version"
)

func main() {
	skel.PluginMainFuncs(cniplugin.Funcs(), cniversion.All, "meshnet "+version.Get().String()+": wires pods to their Topology's links through meshnetd")
}
