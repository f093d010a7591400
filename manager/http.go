package manager

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ctrlkit/ctrlkit/reconcile/prommetrics"
)

// HTTPConfig configures the manager's HTTP servers. The zero value serves
// nothing. Each address set gets its own listener, bound when Run starts (Run
// fails at once if an address cannot be bound, and New if two addresses are the
// same); the servers stop last, after the informers, when Run returns.
//
// The health server speaks plain HTTP without authentication, for the kubelet's
// probes, and tells no secrets:
//
//   - /healthz: 200 "ok" while the process serves (liveness).
//   - /readyz: 200 "ok" when every check passes, else 503 with one line per
//     failing check, "[-]<check> failed", then "readyz check failed". With
//     ?verbose every check is listed, passing ones as "[+]<check> ok". The
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
// Why a check fails (an informer's last error, which may name the manager's
// service account and what it may not do; a controller's error) is never
// served: the manager logs it, once each time a probe finds a check failing
// for a new reason and once when it passes again, and Manager.Informers and
// Manager.Controllers return it to the program.
//
// The metrics server answers /metrics with the Registry's metrics (see
// Manager.ControllerMetrics for the list) and the paths of MetricsHandlers. The
// pprof server answers /debug/pprof/ (see PprofAddress). Both speak TLS and
// admit a request only if it carries a bearer token the API server
// authenticates (a TokenReview, authentication.k8s.io/v1) of a user it allows
// to get the request's path (a SubjectAccessReview, authorization.k8s.io/v1, of
// the non-resource URL, such as "get" on "/metrics"; other methods than GET
// and HEAD ask for their verb, "create" for POST and so on). A request
// without a token, or whose token is not authenticated, is answered 401; an
// authenticated user who is not allowed, 403; neither answer says more. If the
// API server cannot be asked, the answer is 503 and the error is logged. An
// answer is remembered for the token, verb and path for a short while (30
// seconds when allowed, 10 when refused; at most 4096 answers are kept, the
// least recently used go first), so that a scraper every few seconds costs the
// API server two reviews a half-minute. A token the server would revoke meanwhile
// is thus still admitted until its answer expires.
//
// The manager's own rights must allow creating TokenReviews and
// SubjectAccessReviews, and a scraper's must allow getting /metrics (or the
// pprof paths): manager/rbac/rbac.yaml holds the ClusterRoles for both.
// UnsafeInsecureServing turns all of this off.
//
// Every server bounds how long a client may take to send its request's
// headers (10 seconds, at most 64 KiB of them), how long an answer may take to
// write (30 seconds; for the pprof server, MaxProfileDuration and 30 seconds
// more) and how long an idle keep-alive connection is kept (90 seconds).
type HTTPConfig struct {
	// HealthAddress, if set, serves /healthz and /readyz at that address (for
	// example ":8081"; "127.0.0.1:0" picks a free port, see Manager.HealthAddr).
	HealthAddress string
	// MetricsAddress, if set, serves /metrics at that address (for example
	// ":8443"), over TLS to authenticated and authorized callers.
	MetricsAddress string
	// MetricsHandlers are more paths the metrics server serves beside /metrics
	// (ServeMux patterns such as "/debug/vars"), behind the same TLS,
	// authentication and authorization: the SubjectAccessReview asks about the
	// path requested. Ignored without MetricsAddress; "/metrics" is an error.
	MetricsHandlers map[string]http.Handler
	// PprofAddress, if set, serves the runtime's profiles at that address, on a
	// listener of their own, over TLS to authenticated and authorized callers:
	// /debug/pprof/ lists them, /debug/pprof/<profile> serves one (heap,
	// goroutine, allocs, block, mutex, threadcreate; ?debug=1 for text),
	// /debug/pprof/profile a CPU profile and /debug/pprof/trace an execution
	// trace of ?seconds (default 30, or MaxProfileDuration if less). A number of
	// seconds that is not a positive whole number, or is over
	// MaxProfileDuration, is answered 400. Nothing is registered on
	// http.DefaultServeMux.
	PprofAddress string
	// MaxProfileDuration bounds the seconds of a CPU profile or a trace. 0
	// means DefaultMaxProfileDuration; it must not be negative, and is rounded
	// down to whole seconds (at least one).
	MaxProfileDuration time.Duration
	// CertFile and KeyFile are the PEM files of the certificate (with its
	// chain) and private key the metrics and pprof servers present, read when
	// Run starts (which fails if they cannot be) and again when they change
	// (looked at no more than every 10 seconds; a pair that cannot be read
	// keeps the previous one in use, and is logged), so that a rotated Secret
	// is served without a restart. Give both or neither: with neither, Run generates a
	// self-signed certificate in memory (ECDSA P-256, valid for one year from
	// Run's start, for "localhost", 127.0.0.1, ::1 and the host's name), which
	// a client cannot verify: tell it to skip verification (Prometheus:
	// tls_config.insecure_skip_verify) or give files.
	CertFile, KeyFile string
	// UnsafeInsecureServing serves metrics and pprof over plain HTTP to anyone
	// who can reach their addresses, without asking the API server anything.
	// For tests, or an address on loopback behind a proxy that authenticates.
	UnsafeInsecureServing bool
	// Registry is where the manager registers its metrics and what /metrics
	// serves. Nil means a new registry with the Go and process collectors. A
	// Registry serves one manager: a second manager's metrics clash with the
	// first's. When it is set, the manager's metrics are registered on it when
	// Run starts even without a MetricsAddress, for the caller to serve.
	Registry *prometheus.Registry
}

// DefaultMaxProfileDuration is the default of HTTPConfig.MaxProfileDuration.
const DefaultMaxProfileDuration = time.Minute

// The bounds of every server (HTTPConfig lists them).
const (
	readHeaderTimeout = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 90 * time.Second
	maxHeaderBytes    = 64 << 10
)

// shutdownTimeout bounds how long stopping a server waits for the requests in
// flight before it closes their connections.
const shutdownTimeout = 5 * time.Second

// check validates c and fills in the defaults; New calls it.
func (c *HTTPConfig) check() error {
	if c.MaxProfileDuration < 0 {
		return errors.New("manager: HTTPConfig.MaxProfileDuration is negative")
	}
	if c.MaxProfileDuration == 0 {
		c.MaxProfileDuration = DefaultMaxProfileDuration
	}
	c.MaxProfileDuration = max(c.MaxProfileDuration.Truncate(time.Second), time.Second)
	if (c.CertFile == "") != (c.KeyFile == "") {
		return errors.New("manager: HTTPConfig: give both CertFile and KeyFile, or neither")
	}
	if _, ok := c.MetricsHandlers["/metrics"]; ok {
		return errors.New(`manager: HTTPConfig.MetricsHandlers holds "/metrics", which the manager serves`)
	}
	addrs := map[string]string{}
	for _, a := range []struct{ field, addr string }{
		{"HealthAddress", c.HealthAddress}, {"MetricsAddress", c.MetricsAddress}, {"PprofAddress", c.PprofAddress},
	} {
		if a.addr == "" || anyPort(a.addr) {
			continue
		}
		if other, dup := addrs[a.addr]; dup {
			return fmt.Errorf("manager: HTTPConfig.%s and %s are both %q: each server needs its own address", other, a.field, a.addr)
		}
		addrs[a.addr] = a.field
	}
	return nil
}

// serving is the manager's side of HTTP: the metrics registry and the addresses
// bound while Run serves. Its fields are guarded by mu.
type serving struct {
	mu sync.Mutex
	// reg is the registry, made on first use; the manager's collectors are on
	// it (a failed registration leaves it nil).
	reg         *prometheus.Registry
	healthAddr  string // "" unless serving
	metricsAddr string // "" unless serving
	pprofAddr   string // "" unless serving
	// failing holds the reason of each readiness check the last probe found
	// failing, to log a reason once (health.go).
	failing map[string]string
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

// PprofAddr returns the address the pprof server listens on, as HealthAddr
// does for the health server.
func (m *Manager) PprofAddr() string {
	m.srv.mu.Lock()
	defer m.srv.mu.Unlock()
	return m.srv.pprofAddr
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

// server is one of the manager's HTTP servers, before it listens.
type server struct {
	name    string // "health", "metrics" or "pprof", for logs
	addr    string
	handler http.Handler
	secure  bool          // TLS, with the auth gate in handler
	write   time.Duration // http.Server.WriteTimeout
	bound   *string       // the serving field that reports its address
}

// httpServer is the http.Server of s, with its bounds.
func (s server) httpServer(log logr.Logger) *http.Server {
	return &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: readHeaderTimeout,
		WriteTimeout:      s.write,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          stdlog.New(logWriter{log.WithName(s.name)}, "", 0),
	}
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
	servers, err := m.httpServers(ctx)
	if err != nil {
		return nil, err
	}
	if len(servers) == 0 {
		return func() {}, nil
	}
	var tlsConfig *tls.Config
	if !hc.UnsafeInsecureServing && (hc.MetricsAddress != "" || hc.PprofAddress != "") {
		if tlsConfig, err = serverTLS(hc.CertFile, hc.KeyFile, time.Now(), m.log.WithName("tls")); err != nil {
			return nil, err
		}
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
		if s.secure {
			ln = tls.NewListener(ln, tlsConfig)
		}
		listeners = append(listeners, ln)
	}
	var wg sync.WaitGroup
	https := make([]*http.Server, len(servers))
	m.srv.mu.Lock()
	for i, s := range servers {
		ln := listeners[i]
		hs := s.httpServer(m.log)
		https[i] = hs
		wg.Go(func() {
			if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				fail(fmt.Errorf("manager: %s server on %s: %w", s.name, ln.Addr(), err))
			}
		})
		*s.bound = ln.Addr().String()
		m.log.Info("serving HTTP", "server", s.name, "address", ln.Addr().String(), "tls", s.secure)
	}
	m.srv.mu.Unlock()

	return func() {
		m.srv.mu.Lock()
		m.srv.healthAddr, m.srv.metricsAddr, m.srv.pprofAddr = "", "", ""
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

// httpServers makes the servers Config.HTTP asks for; ctx is Run's.
func (m *Manager) httpServers(ctx context.Context) ([]server, error) {
	hc := m.cfg.HTTP
	var servers []server
	if hc.HealthAddress != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			writeText(w, http.StatusOK, "ok")
		})
		ready := func(w http.ResponseWriter, r *http.Request) { m.serveReadyz(ctx, w, r) }
		mux.HandleFunc("/readyz", ready)
		mux.HandleFunc("/readyz/", ready)
		servers = append(servers, server{name: "health", addr: hc.HealthAddress, handler: mux, write: writeTimeout, bound: &m.srv.healthAddr})
	}
	var gate *authGate
	if !hc.UnsafeInsecureServing && (hc.MetricsAddress != "" || hc.PprofAddress != "") {
		var err error
		if gate, err = newAuthGate(m.authRESTConfig(), m.log.WithName("auth")); err != nil {
			return nil, err
		}
	}
	guard := func(h http.Handler) http.Handler {
		if gate == nil {
			return h
		}
		return gate.wrap(h)
	}
	if hc.MetricsAddress != "" {
		reg, err := m.registry()
		if err != nil {
			return nil, err
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		for pattern, h := range hc.MetricsHandlers {
			mux.Handle(pattern, h)
		}
		servers = append(servers, server{name: "metrics", addr: hc.MetricsAddress, handler: guard(mux), secure: gate != nil, write: writeTimeout, bound: &m.srv.metricsAddr})
	}
	if hc.PprofAddress != "" {
		mux := http.NewServeMux()
		addPprof(mux, hc.MaxProfileDuration)
		servers = append(servers, server{name: "pprof", addr: hc.PprofAddress, handler: guard(mux), secure: gate != nil, write: hc.MaxProfileDuration + writeTimeout, bound: &m.srv.pprofAddr})
	}
	return servers, nil
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

// logWriter passes what an http.Server logs (a failed TLS handshake, a
// panicking handler) to the manager's logger, at verbosity 1: anyone who can
// reach a port can make a server log.
type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.V(1).Info(strings.TrimSpace(string(p)))
	return len(p), nil
}
