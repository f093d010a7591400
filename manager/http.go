package manager

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ctrlkit/ctrlkit/reconcile/prommetrics"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// HTTPConfig configures the manager's HTTP servers. The zero value serves
// nothing. The servers listen when Run starts (Run fails at once if an address
// cannot be bound) and stop last, after the informers, when Run returns.
//
// The health server answers:
//
//   - /healthz: 200 "ok" while the process serves (liveness).
//   - /readyz: 200 "ok" when every check passes, else 503 with one line per
//     failing check, "[-]<check> failed: <reason>", then "readyz check failed".
//     With ?verbose every check is listed, passing ones as "[+]<check> ok". The
//     checks are "shutdown" (fails once Run is stopping), "informer/<name>" for
//     each shared informer and "controller/<name>" for each Runnable added with
//     Add (see Manager.Informers and Manager.Controllers for the names; a name
//     that repeats gets " #2", " #3"… in order). An informer passes once it has
//     synced, unless its list or watch has been refused (Forbidden or
//     Unauthorized) since its last progress: a cache RBAC no longer keeps up to
//     date fails. A controller passes while it runs and has synced (its
//     HasSynced), and also while it waits because this process is not the
//     leader: a warm standby is ready once its informers have synced (which
//     their own checks require). A controller that is waiting otherwise, or
//     whose Run has returned, fails.
//   - /readyz/<check>, such as /readyz/informer/pods in default: that check
//     alone, 200 or 503 as above, 404 if there is no such check.
//
// The metrics server answers /metrics with the Registry's metrics (see
// Manager.ControllerMetrics for the list), and /debug/pprof/ if Pprof is set.
// Both servers may share one address: give the same address, with a port
// other than 0, for both.
type HTTPConfig struct {
	// HealthAddress, if set, serves /healthz and /readyz at that address (for
	// example ":8081"; "127.0.0.1:0" picks a free port, see Manager.HealthAddr).
	HealthAddress string
	// MetricsAddress, if set, serves /metrics at that address.
	MetricsAddress string
	// Pprof adds the runtime profiles to the metrics server: /debug/pprof/
	// lists them, /debug/pprof/<profile> serves one (heap, goroutine, allocs,
	// block, mutex, threadcreate; ?debug=1 for text), /debug/pprof/profile a CPU
	// profile of ?seconds (default 30). Nothing is registered on
	// http.DefaultServeMux.
	Pprof bool
	// Registry is where the manager registers its metrics and what /metrics
	// serves. Nil means a new registry with the Go and process collectors. A
	// Registry serves one manager: a second manager's metrics clash with the
	// first's. When it is set, the manager's metrics are registered on it when
	// Run starts even without a MetricsAddress, for the caller to serve.
	Registry *prometheus.Registry
}

// shutdownTimeout bounds how long stopping a server waits for the requests in
// flight before it closes their connections.
const shutdownTimeout = 5 * time.Second

// serving is the manager's side of HTTP: the metrics registry and the addresses
// bound while Run serves. Its fields are guarded by mu.
type serving struct {
	mu sync.Mutex
	// reg is the registry, made on first use; the manager's collectors are on
	// it (a failed registration leaves it nil).
	reg         *prometheus.Registry
	healthAddr  string // "" unless serving
	metricsAddr string // "" unless serving
}

// HealthAddr returns the address the health server listens on, with the port
// the system chose for a ":0" address, from the moment Run has bound it until
// Run returns; "" otherwise, and when HTTPConfig.HealthAddress is empty.
func (m *Manager) HealthAddr() string {
	m.srv.mu.Lock()
	defer m.srv.mu.Unlock()
	return m.srv.healthAddr
}

// MetricsAddr returns the address the metrics server listens on, as HealthAddr
// does for the health server.
func (m *Manager) MetricsAddr() string {
	m.srv.mu.Lock()
	defer m.srv.mu.Unlock()
	return m.srv.metricsAddr
}

// ControllerMetrics makes the Prometheus metrics of the controller called name
// (its reconcile.Config.Name) on the manager's registry (HTTPConfig.Registry or
// the manager's own), for /metrics to serve. Pass the result as the
// controller's reconcile.Config.Metrics, and its Queue() as
// reconcile.Config.QueueMetrics:
//
//	pm, err := m.ControllerMetrics("pods")
//	c := reconcile.New(r, reconcile.Config[K]{Name: "pods", Metrics: pm, QueueMetrics: pm.Queue()})
//
// It fails for an empty name or one asked for before. The series are
// controller_runtime_*{controller=name} and workqueue_*{name=name} (see the
// prommetrics packages of reconcile and workqueue). On first use of the
// registry the manager also registers its own: ctrlkit_informer_* per shared
// informer, ctrlkit_manager_leader, and client-go's rest_client_requests_total
// and rest_client_request_duration_seconds.
//
// The informer series are read from the informers when scraped (no goroutine updates them) and carry the
// label informer="<name>" (a name that repeats gets " #2", " #3"… in the order
// the informers were made):
//
//	ctrlkit_informer_synced                  gauge    1 once the informer has synced, else 0
//	ctrlkit_informer_objects                 gauge    objects in the cache
//	ctrlkit_informer_resource_version        gauge    resourceVersion the cache reflects; absent while it is not a decimal number (servers make them numbers in practice, but promise only an opaque string)
//	ctrlkit_informer_lists_total{mode}       counter  complete lists stored, mode "paginated" (LIST) or "streaming" (watch-list); the first list counts, so relists are this minus one
//	ctrlkit_informer_expired_relists_total   counter  relists forced by an expired or too large resourceVersion (410 Gone)
//	ctrlkit_informer_watches_total           counter  watch requests opened
//	ctrlkit_informer_watch_events_total      counter  Added, Modified and Deleted watch events stored
//	ctrlkit_informer_listed_objects_total    counter  objects received while listing
//	ctrlkit_informer_refused_objects_total   counter  objects left out of the cache: they could not be decoded or transformed
//	ctrlkit_informer_failures_total          counter  errors that made the informer back off
//	ctrlkit_informer_consecutive_failures    gauge    failures since the last progress (0: not failing)
//	ctrlkit_informer_handlers                gauge    handlers registered
//	ctrlkit_informer_handler_backlog         gauge    changes waiting for the handlers, summed over them
//	ctrlkit_manager_leader                   gauge    1 while the controllers may run (this process leads, or there is no leader election)
//
// With Config.Sharding, the replica's part in its group:
//
//	ctrlkit_shard_info{group,identity,field}     gauge    1: this replica, its group and the hashed field
//	ctrlkit_shard_members                        gauge    live replicas in the group, as last seen
//	ctrlkit_shard_slots                          gauge    hash slots held
//	ctrlkit_shard_hash_fraction                  gauge    share of the hash space held, 0 to 1
//	ctrlkit_shard_range{start,end}               gauge    1 per hash range held, [start, end) in hex
//	ctrlkit_shard_handoffs_total{direction}      counter  slots "granted" (taken) and "revoked" (given up)
//	ctrlkit_shard_keys_owned{informer,filtering} gauge    objects a sharded informer holds; filtering "server" or "client" (Health.ShardFiltering)
//
// and client-go's REST client metrics, fed by its tools/metrics hooks, under
// controller-runtime's names:
//
//	rest_client_requests_total{code,method,host}          counter    requests by HTTP status code ("<error>" when no answer came)
//	rest_client_request_duration_seconds{verb,host}       histogram  request latency
//
// The REST client hooks are process-wide in client-go and can be set once: the
// first manager to register its metrics sets them (unless another library did
// before, and then these two series stay empty, which is logged), and every
// manager's registry serves the same two collectors, counting the requests of
// the whole process.
func (m *Manager) ControllerMetrics(name string) (*prommetrics.Metrics, error) {
	reg, err := m.registry()
	if err != nil {
		return nil, err
	}
	pm, err := prommetrics.New(reg, name)
	if err != nil {
		return nil, fmt.Errorf("manager: %w", err)
	}
	return pm, nil
}

// registry returns the manager's registry, making it and registering the
// manager's own collectors on first use.
func (m *Manager) registry() (*prometheus.Registry, error) {
	m.srv.mu.Lock()
	defer m.srv.mu.Unlock()
	if m.srv.reg != nil {
		return m.srv.reg, nil
	}
	reg := m.cfg.HTTP.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(
			collectors.NewGoCollector(),
			collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		)
	}
	if err := m.registerMetrics(reg); err != nil {
		return nil, err
	}
	m.srv.reg = reg
	return reg, nil
}

// serveHTTP starts the servers Config.HTTP asks for; stop shuts them down.
// Errors a server meets while serving go to fail.
func (m *Manager) serveHTTP(ctx context.Context, fail func(error)) (stop func(), err error) {
	hc := m.cfg.HTTP
	if hc.Registry != nil || hc.MetricsAddress != "" {
		if _, err := m.registry(); err != nil {
			return nil, err
		}
	}
	type server struct {
		addr string
		mux  *http.ServeMux
		// health and metrics: which accessor reports its bound address.
		health, metrics bool
	}
	var servers []*server
	at := func(addr string) *server {
		for _, s := range servers {
			if s.addr == addr && !anyPort(addr) {
				return s
			}
		}
		s := &server{addr: addr, mux: http.NewServeMux()}
		servers = append(servers, s)
		return s
	}
	if hc.HealthAddress != "" {
		s := at(hc.HealthAddress)
		s.health = true
		s.mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			writeText(w, http.StatusOK, "ok")
		})
		ready := func(w http.ResponseWriter, r *http.Request) { m.serveReadyz(ctx, w, r) }
		s.mux.HandleFunc("/readyz", ready)
		s.mux.HandleFunc("/readyz/", ready)
	}
	if hc.MetricsAddress != "" {
		s := at(hc.MetricsAddress)
		s.metrics = true
		reg, err := m.registry()
		if err != nil {
			return nil, err
		}
		s.mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		if hc.Pprof {
			addPprof(s.mux)
		}
	}
	if len(servers) == 0 {
		return func() {}, nil
	}

	// Listen on every address before serving any, so that a failure leaves
	// nothing behind.
	listeners := make([]net.Listener, 0, len(servers))
	for _, s := range servers {
		ln, err := net.Listen("tcp", s.addr)
		if err != nil {
			for _, l := range listeners {
				l.Close()
			}
			return nil, fmt.Errorf("manager: listen on %q: %w", s.addr, err)
		}
		listeners = append(listeners, ln)
	}
	var wg sync.WaitGroup
	https := make([]*http.Server, len(servers))
	m.srv.mu.Lock()
	for i, s := range servers {
		ln := listeners[i]
		hs := &http.Server{Handler: s.mux, ReadHeaderTimeout: 10 * time.Second}
		https[i] = hs
		wg.Go(func() {
			if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				fail(fmt.Errorf("manager: HTTP server on %s: %w", ln.Addr(), err))
			}
		})
		if s.health {
			m.srv.healthAddr = ln.Addr().String()
		}
		if s.metrics {
			m.srv.metricsAddr = ln.Addr().String()
		}
		m.log.Info("serving HTTP", "address", ln.Addr().String(), "health", s.health, "metrics", s.metrics)
	}
	m.srv.mu.Unlock()

	return func() {
		m.srv.mu.Lock()
		m.srv.healthAddr, m.srv.metricsAddr = "", ""
		m.srv.mu.Unlock()
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		for _, hs := range https {
			if err := hs.Shutdown(sctx); err != nil {
				hs.Close() // requests still in flight: cut them
			}
		}
		wg.Wait()
	}, nil
}

// anyPort reports whether addr lets the system choose the port.
func anyPort(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	return err == nil && (port == "0" || port == "")
}

// writeText writes a plain-text answer.
func writeText(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprint(w, body)
}

// check is one readiness check and, if it fails, why.
type check struct {
	name   string
	reason string // "" when it passes
}

// serveReadyz answers /readyz and /readyz/<check>. ctx is Run's: once it ends,
// the manager is stopping.
func (m *Manager) serveReadyz(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	standby := m.cfg.LeaderElection != nil && !m.Leading()
	checks := readinessChecks(ctx.Err() != nil, standby, m.Informers(), m.Controllers())
	name := strings.TrimPrefix(r.URL.Path, "/readyz")
	if name == "" || name == "/" {
		_, verbose := r.URL.Query()["verbose"]
		code, body := readyzAnswer(checks, verbose)
		writeText(w, code, body)
		return
	}
	name = name[1:]
	for _, c := range checks {
		if c.name == name {
			code, body := readyzAnswer([]check{c}, false)
			writeText(w, code, body)
			return
		}
	}
	writeText(w, http.StatusNotFound, fmt.Sprintf("no readyz check %q\n", name))
}

// readinessChecks decides each check from the manager's state: stopping is true
// once Run is stopping, standby while a leader election is configured and this
// process does not lead. See HTTPConfig for the rules.
func readinessChecks(stopping, standby bool, infs []InformerStatus, ctls []ControllerStatus) []check {
	checks := make([]check, 0, 1+len(infs)+len(ctls))
	shutdown := check{name: "shutdown"}
	if stopping {
		shutdown.reason = "the manager is stopping"
	}
	checks = append(checks, shutdown)
	names := uniqueNames{}
	for _, inf := range infs {
		checks = append(checks, check{name: "informer/" + names.next(inf.Name), reason: informerNotReady(inf)})
	}
	names = uniqueNames{}
	for _, c := range ctls {
		checks = append(checks, check{name: "controller/" + names.next(c.Name), reason: controllerNotReady(c, standby)})
	}
	return checks
}

// informerNotReady says why inf is not ready, or "" if it is.
func informerNotReady(inf InformerStatus) string {
	h := inf.Health
	failing := h.ConsecutiveFailures > 0 && h.LastError != nil
	var access *reflector.AccessError
	refused := failing && errors.As(h.LastError, &access)
	if inf.Synced && !refused {
		return ""
	}
	var b strings.Builder
	if inf.Synced {
		b.WriteString("synced, but no longer kept up to date")
	} else {
		b.WriteString("not synced")
	}
	fmt.Fprintf(&b, " (%s", h.State)
	if failing {
		fmt.Fprintf(&b, ", %d consecutive failures", h.ConsecutiveFailures)
	}
	b.WriteString(")")
	if failing {
		switch {
		case errors.Is(h.LastError, reflector.ErrForbidden):
			b.WriteString(": forbidden")
		case errors.Is(h.LastError, reflector.ErrUnauthorized):
			b.WriteString(": unauthorized")
		}
		b.WriteString(": " + oneLine(h.LastError.Error()))
	}
	return b.String()
}

// controllerNotReady says why c is not ready, or "" if it is.
func controllerNotReady(c ControllerStatus, standby bool) string {
	switch c.State {
	case Running:
		if !c.Synced {
			return "running, sources not synced yet"
		}
		return ""
	case Waiting:
		if standby {
			return ""
		}
		return "not started yet"
	}
	if c.Err != nil {
		return "ended: " + oneLine(c.Err.Error())
	}
	return "ended"
}

// readyzAnswer is the status code and body of an answer listing checks.
func readyzAnswer(checks []check, verbose bool) (int, string) {
	failed := false
	for _, c := range checks {
		failed = failed || c.reason != ""
	}
	if !failed && !verbose {
		return http.StatusOK, "ok"
	}
	var b strings.Builder
	for _, c := range checks {
		switch {
		case c.reason != "":
			fmt.Fprintf(&b, "[-]%s failed: %s\n", c.name, c.reason)
		case verbose:
			fmt.Fprintf(&b, "[+]%s ok\n", c.name)
		}
	}
	if failed {
		b.WriteString("readyz check failed\n")
		return http.StatusServiceUnavailable, b.String()
	}
	b.WriteString("readyz check passed\n")
	return http.StatusOK, b.String()
}

// oneLine keeps a reason on one line of the answer.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// uniqueNames tells apart names that repeat: the second "x" is "x #2".
type uniqueNames map[string]int

func (u uniqueNames) next(name string) string {
	u[name]++
	if n := u[name]; n > 1 {
		return fmt.Sprintf("%s #%d", name, n)
	}
	return name
}

// addPprof serves the runtime's profiles under /debug/pprof/ on mux, with
// runtime/pprof alone (net/http/pprof would also register them on
// http.DefaultServeMux).
func addPprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/debug/pprof/")
		if name == "" {
			var b strings.Builder
			b.WriteString("profile\n")
			for _, p := range pprof.Profiles() {
				fmt.Fprintf(&b, "%s\n", p.Name())
			}
			writeText(w, http.StatusOK, b.String())
			return
		}
		p := pprof.Lookup(name)
		if p == nil {
			writeText(w, http.StatusNotFound, fmt.Sprintf("no profile %q\n", name))
			return
		}
		debug, _ := strconv.Atoi(r.URL.Query().Get("debug"))
		if debug > 0 {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		} else {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if name == "heap" && r.URL.Query().Get("gc") != "" {
			runtime.GC()
		}
		p.WriteTo(w, debug)
	})
	mux.HandleFunc("/debug/pprof/profile", func(w http.ResponseWriter, r *http.Request) {
		secs, err := strconv.Atoi(r.URL.Query().Get("seconds"))
		if err != nil || secs <= 0 {
			secs = 30
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="profile"`)
		if err := pprof.StartCPUProfile(w); err != nil {
			w.Header().Del("Content-Disposition")
			writeText(w, http.StatusInternalServerError, "could not start the CPU profile: "+err.Error()+"\n")
			return
		}
		t := time.NewTimer(time.Duration(secs) * time.Second)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
		}
		pprof.StopCPUProfile()
	})
}
