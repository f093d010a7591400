// Command kube-apiserver builds the Kubernetes API server from k8s.io/kubernetes so that
// testenv can run a real control plane without downloading release binaries.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
