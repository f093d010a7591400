// Command etcd builds the etcd server from go.etcd.io/etcd/server/v3 for testenv.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
