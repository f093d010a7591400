package backend_test

import (
	"context"
	"fmt"
	"net"
	"os"

	"github.com/ctrlkit/ctrlkit/examples/network-controller/backend"
)

// Example runs the backend on a loopback port, creates a network through the client,
// and restarts the backend on the same directory: the network is still there.
func Example() {
	dir, _ := os.MkdirTemp("", "backend-example")
	defer os.RemoveAll(dir)

	start := func() (url string, stop func()) {
		s, err := backend.New(dir)
		if err != nil {
			panic(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Serve(ctx, ln) }()
		return "http://" + ln.Addr().String(), func() { cancel(); <-done }
	}

	ctx := context.Background()
	url, stop := start()
	c, _ := backend.NewClient(url, nil)
	created, err := c.Put(ctx, backend.Network{Namespace: "default", Name: "example-network",
		Spec: backend.Spec{CIDR: "192.168.0.0/16", Gateway: "192.168.0.1"}})
	fmt.Println("created:", created, err)
	stop()

	url, stop = start()
	defer stop()
	c, _ = backend.NewClient(url, nil)
	n, err := c.Get(ctx, "default", "example-network")
	fmt.Printf("after restart: %s %s via %s, %v\n", n.Key(), n.CIDR, n.Gateway, err)
	// Output:
	// created: true <nil>
	// after restart: default/example-network 192.168.0.0/16 via 192.168.0.1, <nil>
}
