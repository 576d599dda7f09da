// Command etcd is the upstream etcd server, built from the module proxy for the
// cluster test tier.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
