package manager

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

type cm = *corev1.ConfigMap

// newHTTPManager returns a manager whose cluster does not answer: tests give it
// informers of their own with addInformer.
func newHTTPManager(t *testing.T, hc HTTPConfig) *Manager {
	t.Helper()
	m, err := New(Config{RESTConfig: &rest.Config{Host: "http://127.0.0.1:1"}, HTTP: hc})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// addInformer makes inf one of m's shared informers, as Typed would.
func addInformer[T reflector.Object](m *Manager, inf *informer.Informer[T]) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := &informerEntry{inf: inf, len: func() int { return inf.Indexer().Len() }, refs: 1}
	m.byPointer[inf] = e
	m.order = append(m.order, e)
	if m.startInformer != nil {
		m.startInformer(e)
	}
}

// newServer returns an in-memory server holding n ConfigMaps.
func newServer(t *testing.T, n int) *reflectortest.Server[cm] {
	t.Helper()
	s := reflectortest.NewServer[cm](reflectortest.Config{Resource: schema.GroupResource{Resource: "configmaps"}})
	for i := range n {
		if _, err := s.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm-" + string(rune('a'+i))}}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

var errForbidden = &reflector.AccessError{
	Name: "configmaps in ns", Verb: "list", Reason: metav1.StatusReasonForbidden,
	Err: apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New(`User "norights" cannot list resource "configmaps"`)),
}

// TestReadinessChecks: the rules of /readyz (see HTTPConfig) and the answer's
// status and body, plain and verbose. Covers controller-runtime's healthz
// handler tests (TestHealthz: all checks pass → 200 "ok"; a failing check → 503
// naming it; verbose lists every check) in ctrlkit's terms: the checks come
// from the manager's state, not from registered functions.
func TestReadinessChecks(t *testing.T) {
	synced := InformerStatus{Name: "pods", Synced: true, Health: reflector.Health{State: reflector.StateWatching}}
	tests := []struct {
		name     string
		stopping bool
		standby  bool
		infs     []InformerStatus
		ctls     []ControllerStatus
		verbose  bool
		code     int
		body     string
	}{{
		name: "nothing to wait for",
		code: 200, body: "ok",
	}, {
		name: "synced and running",
		infs: []InformerStatus{synced},
		ctls: []ControllerStatus{{Name: "c", State: Running, Synced: true}},
		code: 200, body: "ok",
	}, {
		name:    "verbose lists every check",
		infs:    []InformerStatus{synced},
		ctls:    []ControllerStatus{{Name: "c", State: Running, Synced: true}},
		verbose: true,
		code:    200, body: "[+]shutdown ok\n[+]informer/pods ok\n[+]controller/c ok\nreadyz check passed\n",
	}, {
		name: "forbidden informer",
		infs: []InformerStatus{synced, {Name: "configmaps in ns", Health: reflector.Health{
			State: reflector.StateBackingOff, LastError: errForbidden, ConsecutiveFailures: 3}}},
		code: 503,
		body: "[-]informer/configmaps in ns failed\nreadyz check failed\n",
	}, {
		name:    "verbose failure lists the passing checks too",
		infs:    []InformerStatus{synced, {Name: "configmaps", Health: reflector.Health{State: reflector.StateListing}}},
		verbose: true,
		code:    503,
		body:    "[+]shutdown ok\n[+]informer/pods ok\n[-]informer/configmaps failed\nreadyz check failed\n",
	}, {
		name: "recovered informer: an old error does not count",
		infs: []InformerStatus{{Name: "configmaps", Synced: true, Health: reflector.Health{
			State: reflector.StateWatching, LastError: errForbidden}}},
		code: 200, body: "ok",
	}, {
		name: "synced informer failing for a transient error stays ready",
		infs: []InformerStatus{{Name: "configmaps", Synced: true, Health: reflector.Health{
			State: reflector.StateBackingOff, LastError: errors.New("connection refused"), ConsecutiveFailures: 2}}},
		code: 200, body: "ok",
	}, {
		name: "synced informer whose rights were taken away",
		infs: []InformerStatus{{Name: "configmaps", Synced: true, Health: reflector.Health{
			State: reflector.StateBackingOff, LastError: errForbidden, ConsecutiveFailures: 1}}},
		code: 503,
		body: "[-]informer/configmaps failed\nreadyz check failed\n",
	}, {
		name:    "warm standby is ready",
		standby: true,
		infs:    []InformerStatus{synced},
		ctls:    []ControllerStatus{{Name: "c", State: Waiting}},
		code:    200, body: "ok",
	}, {
		name: "controllers not started, not standby",
		ctls: []ControllerStatus{{Name: "c", State: Waiting}, {Name: "d", State: Running}},
		code: 503,
		body: "[-]controller/c failed\n[-]controller/d failed\nreadyz check failed\n",
	}, {
		name: "ended controllers",
		ctls: []ControllerStatus{{Name: "c", State: Ended, Err: errors.New("boom\nsecond line")}, {Name: "c", State: Ended}},
		code: 503,
		body: "[-]controller/c failed\n[-]controller/c #2 failed\nreadyz check failed\n",
	}, {
		name:     "stopping",
		stopping: true,
		infs:     []InformerStatus{synced},
		code:     503,
		body:     "[-]shutdown failed\nreadyz check failed\n",
	}, {
		name: "informers of one name are told apart",
		infs: []InformerStatus{synced, {Name: "pods"}},
		code: 503,
		body: "[-]informer/pods #2 failed\nreadyz check failed\n",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := readyzAnswer(readinessChecks(tt.stopping, tt.standby, tt.infs, tt.ctls), tt.verbose)
			if code != tt.code {
				t.Errorf("code %d, want %d", code, tt.code)
			}
			if d := cmp.Diff(tt.body, body); d != "" {
				t.Errorf("body (-want +got):\n%s", d)
			}
		})
	}
}

// get answers a GET of url: status code and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// startedRunnable is a Runnable that says when it starts and is synced from then on.
type startedRunnable struct{ started chan struct{} }

func (r *startedRunnable) Name() string    { return "worker" }
func (r *startedRunnable) HasSynced() bool { return true }
func (r *startedRunnable) Run(ctx context.Context) error {
	close(r.started)
	<-ctx.Done()
	return nil
}

// TestServeHTTP: with addresses "127.0.0.1:0" Run binds the three servers
// before it waits for the informers; /readyz answers 503 naming a Forbidden
// informer but not why, then 200 once the informer is allowed and the
// controllers run; /healthz answers throughout; /metrics serves the informer
// and leader series, and the pprof server (its own, not the metrics server)
// its profiles, refusing a CPU profile or trace longer than
// MaxProfileDuration. When Run returns the servers are closed and the
// addresses "".
func TestServeHTTP(t *testing.T) {
	srv := newServer(t, 3)
	srv.Forbid(reflectortest.List, true)
	refused := make(chan struct{}, 100)
	inf := informer.New[cm](srv, informer.Config[cm]{
		Name:      "configmaps in ns",
		Reflector: reflector.Config[cm]{Backoff: reflector.Backoff{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond}},
		OnError: func(err error) {
			if errors.Is(err, reflector.ErrForbidden) {
				select {
				case refused <- struct{}{}:
				default:
				}
			}
		},
	})
	m := newHTTPManager(t, HTTPConfig{
		HealthAddress: "127.0.0.1:0", MetricsAddress: "127.0.0.1:0", PprofAddress: "127.0.0.1:0",
		MaxProfileDuration: 2 * time.Second, UnsafeInsecureServing: true,
	})
	addInformer(m, inf)
	worker := &startedRunnable{started: make(chan struct{})}
	if err := m.Add(worker); err != nil {
		t.Fatal(err)
	}
	if m.HealthAddr() != "" || m.MetricsAddr() != "" {
		t.Fatalf("addresses %q and %q before Run, want none", m.HealthAddr(), m.MetricsAddr())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()

	<-refused // the informer started, so the servers listen
	health, metrics, pprof := "http://"+m.HealthAddr(), "http://"+m.MetricsAddr(), "http://"+m.PprofAddr()
	if health == metrics || metrics == pprof || health == pprof {
		t.Fatalf("health %s, metrics %s, pprof %s: want three servers", health, metrics, pprof)
	}
	if code, body := get(t, health+"/healthz"); code != 200 || body != "ok" {
		t.Errorf("/healthz: %d %q, want 200 ok", code, body)
	}
	code, body := get(t, health+"/readyz")
	if want := "[-]informer/configmaps in ns failed\n[-]controller/worker failed\nreadyz check failed\n"; code != 503 || body != want {
		t.Errorf("/readyz while forbidden: %d %q, want 503 %q (the names, no reason)", code, body, want)
	}
	if code, body := get(t, health+"/readyz/informer/configmaps%20in%20ns"); code != 503 || body != "[-]informer/configmaps in ns failed\nreadyz check failed\n" {
		t.Errorf("/readyz/informer/configmaps in ns: %d %q, want 503 naming it alone", code, body)
	}
	if code, _ := get(t, health+"/readyz/informer/nothing"); code != 404 {
		t.Errorf("/readyz/informer/nothing: %d, want 404", code)
	}

	srv.Forbid(reflectortest.List, false)
	<-worker.started
	if code, body := get(t, health+"/readyz"); code != 200 || body != "ok" {
		t.Errorf("/readyz once allowed: %d %q, want 200 ok", code, body)
	}
	code, body = get(t, health+"/readyz?verbose")
	if want := "[+]shutdown ok\n[+]informer/configmaps in ns ok\n[+]controller/worker ok\nreadyz check passed\n"; code != 200 || body != want {
		t.Errorf("/readyz?verbose: %d %q, want 200 %q", code, body, want)
	}

	code, body = get(t, metrics+"/metrics")
	for _, want := range []string{
		`ctrlkit_informer_objects{informer="configmaps in ns"} 3`,
		`ctrlkit_informer_synced{informer="configmaps in ns"} 1`,
		`ctrlkit_manager_leader 1`,
		`go_goroutines `,
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics: %d, no line %q in\n%s", code, want, body)
		}
	}
	if code, body := get(t, pprof+"/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine\n") || !strings.Contains(body, "trace\n") {
		t.Errorf("/debug/pprof/: %d %q, want 200 listing goroutine and trace", code, body)
	}
	if code, body := get(t, pprof+"/debug/pprof/goroutine?debug=1"); code != 200 || !strings.Contains(body, "goroutine profile:") {
		t.Errorf("/debug/pprof/goroutine?debug=1: %d, want 200 and the profile", code)
	}
	for _, path := range []string{"/debug/pprof/profile?seconds=3", "/debug/pprof/trace?seconds=3", "/debug/pprof/profile?seconds=-1", "/debug/pprof/trace?seconds=x"} {
		if code, body := get(t, pprof+path); code != 400 || !strings.Contains(body, "seconds") {
			t.Errorf("%s with a maximum of 2s: %d %q, want 400", path, code, body)
		}
	}
	if code, body := get(t, pprof+"/debug/pprof/profile?seconds=1"); code != 200 || len(body) == 0 {
		t.Errorf("/debug/pprof/profile?seconds=1: %d, %d bytes, want 200 and a profile", code, len(body))
	}
	if code, _ := get(t, metrics+"/debug/pprof/"); code != 404 {
		t.Errorf("/debug/pprof/ on the metrics server: %d, want 404", code)
	}
	if code, _ := get(t, health+"/metrics"); code != 404 {
		t.Errorf("/metrics on the health server: %d, want 404", code)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if m.HealthAddr() != "" || m.MetricsAddr() != "" || m.PprofAddr() != "" {
		t.Errorf("addresses %q, %q and %q after Run, want none", m.HealthAddr(), m.MetricsAddr(), m.PprofAddr())
	}
	if c, err := net.Dial("tcp", strings.TrimPrefix(health, "http://")); err == nil {
		c.Close()
		t.Errorf("the health server still accepts connections after Run")
	}
}

// TestHTTPConfigCheck: New refuses an HTTPConfig that cannot be served as
// documented, and fills in MaxProfileDuration.
func TestHTTPConfigCheck(t *testing.T) {
	for _, tt := range []struct {
		name string
		hc   HTTPConfig
		want string // in the error
	}{
		{"health and metrics share an address", HTTPConfig{HealthAddress: "127.0.0.1:8080", MetricsAddress: "127.0.0.1:8080"}, "each server needs its own address"},
		{"metrics and pprof share an address", HTTPConfig{MetricsAddress: ":8443", PprofAddress: ":8443"}, "each server needs its own address"},
		{"a certificate without its key", HTTPConfig{MetricsAddress: ":8443", CertFile: "tls.crt"}, "both CertFile and KeyFile"},
		{"negative MaxProfileDuration", HTTPConfig{MaxProfileDuration: -time.Second}, "negative"},
		{"a handler of /metrics", HTTPConfig{MetricsHandlers: map[string]http.Handler{"/metrics": http.NotFoundHandler()}}, `"/metrics"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(Config{RESTConfig: &rest.Config{Host: "http://127.0.0.1:1"}, HTTP: tt.hc})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New = %v, want an error with %q", err, tt.want)
			}
		})
	}
	for _, tt := range []struct{ in, want time.Duration }{{0, DefaultMaxProfileDuration}, {2500 * time.Millisecond, 2 * time.Second}, {time.Millisecond, time.Second}} {
		m := newHTTPManager(t, HTTPConfig{HealthAddress: "127.0.0.1:0", MetricsAddress: "127.0.0.1:0", PprofAddress: "127.0.0.1:0", MaxProfileDuration: tt.in})
		if got := m.cfg.HTTP.MaxProfileDuration; got != tt.want {
			t.Errorf("MaxProfileDuration %v became %v, want %v", tt.in, got, tt.want)
		}
	}
}

// TestServeHTTPListenFails: Run returns the listen error at once, before it
// starts anything, and serves nothing.
func TestServeHTTPListenFails(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	m := newHTTPManager(t, HTTPConfig{HealthAddress: "127.0.0.1:0", MetricsAddress: busy.Addr().String()})
	worker := &startedRunnable{started: make(chan struct{})}
	if err := m.Add(worker); err != nil {
		t.Fatal(err)
	}
	err = m.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "manager: listen on") {
		t.Fatalf("Run = %v, want the listen error", err)
	}
	select {
	case <-worker.started:
		t.Error("a controller started although Run failed to listen")
	default:
	}
	if m.HealthAddr() != "" {
		t.Errorf("HealthAddr %q after a failed Run, want none", m.HealthAddr())
	}
}

// TestNothingListensByDefault: the zero HTTPConfig binds nothing.
func TestNothingListensByDefault(t *testing.T) {
	m := newHTTPManager(t, HTTPConfig{})
	worker := &startedRunnable{started: make(chan struct{})}
	if err := m.Add(worker); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	<-worker.started
	if m.HealthAddr() != "" || m.MetricsAddr() != "" || m.PprofAddr() != "" {
		t.Errorf("addresses %q, %q and %q, want none", m.HealthAddr(), m.MetricsAddr(), m.PprofAddr())
	}
	m.srv.mu.Lock()
	reg := m.srv.reg
	m.srv.mu.Unlock()
	if reg != nil {
		t.Error("a registry was made although nothing asked for metrics")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}

// TestInformerCollector: the ctrlkit_informer_* series of a synced informer
// whose one handler is stuck, read when scraped; the leader gauge is 0 while Run
// is not running.
func TestInformerCollector(t *testing.T) {
	srv := newServer(t, 3)
	inf := informer.New[cm](srv, informer.Config[cm]{Name: "configmaps in ns"})
	entered, release := make(chan struct{}), make(chan struct{})
	first := true
	if _, err := inf.AddHandler(informer.HandlerFuncs[cm]{AddFunc: func(cm, bool) {
		if first {
			first = false
			close(entered)
			<-release
		}
	}}, informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	// A free handler, added after the stuck one: a change it has seen has been
	// queued for the stuck one too (the informer queues in order of addition).
	seen := make(chan string, 10)
	if _, err := inf.AddHandler(informer.HandlerFuncs[cm]{AddFunc: func(c cm, _ bool) { seen <- c.Name }}, informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("informer Run = %v", err)
		}
	}()
	defer close(release)
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	<-entered
	for _, name := range []string{"x", "y"} {
		if _, err := srv.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 + 2 {
		<-seen
	}

	reg := prometheus.NewRegistry()
	m := newHTTPManager(t, HTTPConfig{Registry: reg})
	addInformer(m, inf)
	if _, err := m.registry(); err != nil {
		t.Fatal(err)
	}
	// The stuck handler took the initial list in one go; the two creates wait.
	// (Watch counters are published apart from the cache: not compared.)
	want := `
# HELP ctrlkit_informer_handler_backlog Number of changes waiting for the informer's handlers, summed over them.
# TYPE ctrlkit_informer_handler_backlog gauge
ctrlkit_informer_handler_backlog{informer="configmaps in ns"} 2
# HELP ctrlkit_informer_handlers Number of handlers registered on the informer.
# TYPE ctrlkit_informer_handlers gauge
ctrlkit_informer_handlers{informer="configmaps in ns"} 2
# HELP ctrlkit_informer_lists_total Number of complete lists the informer stored, by mode: paginated LIST or streaming watch-list. The first list counts.
# TYPE ctrlkit_informer_lists_total counter
ctrlkit_informer_lists_total{informer="configmaps in ns",mode="paginated"} 1
ctrlkit_informer_lists_total{informer="configmaps in ns",mode="streaming"} 0
# HELP ctrlkit_informer_objects Number of objects in the informer's cache.
# TYPE ctrlkit_informer_objects gauge
ctrlkit_informer_objects{informer="configmaps in ns"} 5
# HELP ctrlkit_informer_resource_version The resourceVersion the informer's cache reflects, as a number; absent when it is not a decimal number.
# TYPE ctrlkit_informer_resource_version gauge
ctrlkit_informer_resource_version{informer="configmaps in ns"} 5
# HELP ctrlkit_informer_synced 1 once the informer has synced its first list, else 0.
# TYPE ctrlkit_informer_synced gauge
ctrlkit_informer_synced{informer="configmaps in ns"} 1
# HELP ctrlkit_manager_leader 1 while the manager's controllers may run: it holds the leader lease, or there is no leader election.
# TYPE ctrlkit_manager_leader gauge
ctrlkit_manager_leader 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"ctrlkit_informer_handler_backlog", "ctrlkit_informer_handlers", "ctrlkit_informer_lists_total",
		"ctrlkit_informer_objects", "ctrlkit_informer_resource_version", "ctrlkit_informer_synced",
		"ctrlkit_manager_leader"); err != nil {
		t.Error(err)
	}
}

// TestControllerMetrics: ControllerMetrics registers a controller's series on
// the manager's registry once per name; a second manager cannot share the
// registry.
func TestControllerMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newHTTPManager(t, HTTPConfig{Registry: reg})
	pm, err := m.ControllerMetrics("pods")
	if err != nil {
		t.Fatal(err)
	}
	var _ reconcile.Metrics = pm
	pm.Queue().Added()
	if _, err := m.ControllerMetrics("pods"); err == nil {
		t.Error("ControllerMetrics twice for one name: no error")
	}
	if _, err := m.ControllerMetrics("other"); err != nil {
		t.Errorf("ControllerMetrics(other) = %v", err)
	}
	n, err := testutil.GatherAndCount(reg, "workqueue_adds_total", "controller_runtime_reconcile_total", "ctrlkit_manager_leader")
	if err != nil {
		t.Fatal(err)
	}
	// 2 queues, 2 controllers × 4 results, the leader gauge.
	if n != 2+8+1 {
		t.Errorf("%d series, want 11", n)
	}
	other := newHTTPManager(t, HTTPConfig{Registry: reg})
	if _, err := other.ControllerMetrics("third"); err == nil || !strings.Contains(err.Error(), "manager: register metrics") {
		t.Errorf("a second manager on the registry: %v, want a registration error", err)
	}
}

// TestRESTClientMetrics: client-go's requests through the manager's clients are
// counted in rest_client_requests_total and rest_client_request_duration_seconds
// by code, method and host. Covers controller-runtime's client-go adapter
// (requests counted by code, method and host; latency by verb and host).
func TestRESTClientMetrics(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
	}))
	defer api.Close()
	reg := prometheus.NewRegistry()
	m, err := New(Config{RESTConfig: &rest.Config{Host: api.URL}, HTTP: HTTPConfig{Registry: reg}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.registry(); err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(api.URL, "http://")
	before := testutil.ToFloat64(restRequests.WithLabelValues("404", "GET", host))
	for range 3 {
		if _, err := m.Kubernetes().CoreV1().ConfigMaps("ns").Get(context.Background(), "x", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("Get = %v, want NotFound", err)
		}
	}
	if got := testutil.ToFloat64(restRequests.WithLabelValues("404", "GET", host)) - before; got != 3 {
		t.Errorf("rest_client_requests_total{code=404,method=GET} grew by %v, want 3", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "rest_client_request_duration_seconds" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["host"] == host && labels["verb"] == "GET" && mt.GetHistogram().GetSampleCount() >= 3 {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("no rest_client_request_duration_seconds{verb=GET,host=%s} with 3 samples in the registry", host)
	}
}
