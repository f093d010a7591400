package manager

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// HTTPConfig configures the manager's HTTP servers. The zero value serves
// nothing.
type HTTPConfig struct {
	// HealthAddress, if set, serves /healthz and /readyz at that address (for
	// example ":8081"; "127.0.0.1:0" picks a free port, see Manager.HealthAddr).
	HealthAddress string
	// MetricsAddress, if set, serves /metrics at that address.
	MetricsAddress string
	// Pprof adds net/http/pprof's /debug/pprof/ handlers to the metrics server.
	Pprof bool
	// Registry is where the manager registers its metrics and what /metrics
	// serves. Nil means a new registry with the Go and process collectors.
	Registry *prometheus.Registry
}

// serveHTTP starts the servers Config.HTTP asks for; stop shuts them down.
// Errors a server meets while serving go to fail.
func (m *Manager) serveHTTP(ctx context.Context, fail func(error)) (stop func(), err error) {
	if m.cfg.HTTP.HealthAddress != "" || m.cfg.HTTP.MetricsAddress != "" {
		return nil, errors.New("manager: HTTP servers are not built yet")
	}
	return func() {}, nil
}
