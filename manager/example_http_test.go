package manager_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/manager"
)

// started is a Runnable that says when the manager starts it.
type started chan struct{}

func (s started) Run(ctx context.Context) error {
	close(s)
	<-ctx.Done()
	return nil
}

// The manager serves its probes on a free port when asked; HealthAddr says
// which one once Run has bound it.
func ExampleManager_HealthAddr() {
	m, _ := manager.New(manager.Config{
		RESTConfig: &rest.Config{Host: "http://127.0.0.1:1"}, // no request is made here
		HTTP:       manager.HTTPConfig{HealthAddress: "127.0.0.1:0"},
	})
	s := make(started)
	m.Add(s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	<-s // running, so the server listens

	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + m.HealthAddr() + "/readyz?verbose")
	if err != nil {
		fmt.Println(err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode)
		fmt.Print(string(body))
	}

	cancel()
	fmt.Println(<-done, m.HealthAddr() == "")
	// Output:
	// 200
	// [+]shutdown ok
	// [+]controller/manager_test.started ok
	// readyz check passed
	// <nil> true
}

// A production manager: probes for the kubelet on :8081, and metrics and
// profiles over TLS on ports of their own, for the callers the API server
// authenticates and allows (bind the ClusterRoles ctrlkit-metrics-reader and
// ctrlkit-pprof-reader of manager/rbac/rbac.yaml to them). The certificate
// comes from a mounted Secret; without one, the manager makes a self-signed
// one when Run starts.
func ExampleHTTPConfig() {
	cfg, err := manager.LoadRESTConfig("")
	if err != nil {
		fmt.Println(err)
		return
	}
	m, err := manager.New(manager.Config{
		RESTConfig: cfg,
		HTTP: manager.HTTPConfig{
			HealthAddress:      ":8081",
			MetricsAddress:     ":8443",
			PprofAddress:       ":8444",
			MaxProfileDuration: 30 * time.Second,
			CertFile:           "/etc/metrics-tls/tls.crt",
			KeyFile:            "/etc/metrics-tls/tls.key",
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = m // add informers and controllers, then m.Run(ctx)
}
