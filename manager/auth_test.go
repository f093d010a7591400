package manager

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ctrlkit/ctrlkit/reflector"
)

// reviewer is a fake API server's answers to reviews: the users of tokens and
// the paths each user may get. It counts the reviews asked.
type reviewer struct {
	users   map[string]authenticationv1.UserInfo // by token
	allowed map[string][]string                  // user → paths allowed with verb get
	fail    atomic.Bool                          // answer every review with an error

	mu   sync.Mutex
	tr   int
	sar  int
	last authorizationv1.SubjectAccessReviewSpec
}

func (rv *reviewer) tokenReview(spec authenticationv1.TokenReviewSpec) authenticationv1.TokenReviewStatus {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	rv.tr++
	u, ok := rv.users[spec.Token]
	return authenticationv1.TokenReviewStatus{Authenticated: ok, User: u}
}

func (rv *reviewer) accessReview(spec authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	rv.sar++
	rv.last = spec
	a := spec.NonResourceAttributes
	if a == nil || spec.ResourceAttributes != nil {
		return authorizationv1.SubjectAccessReviewStatus{}
	}
	for _, p := range rv.allowed[spec.User] {
		if p == a.Path && a.Verb == "get" {
			return authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: "secret reason"}
		}
	}
	return authorizationv1.SubjectAccessReviewStatus{Reason: "user " + spec.User + " may not"}
}

func (rv *reviewer) counts() (tr, sar int) {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	return rv.tr, rv.sar
}

func newReviewer() *reviewer {
	return &reviewer{
		users: map[string]authenticationv1.UserInfo{
			"reader-token": {Username: "system:serviceaccount:mon:prometheus", UID: "u1", Groups: []string{"system:serviceaccounts"}, Extra: map[string]authenticationv1.ExtraValue{"k": {"v"}}},
			"other-token":  {Username: "system:serviceaccount:default:other"},
		},
		allowed: map[string][]string{"system:serviceaccount:mon:prometheus": {"/metrics"}},
	}
}

// fakeClient is a fake clientset whose review creations rv answers.
func (rv *reviewer) fakeClient() *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if rv.fail.Load() {
			return true, nil, errors.New("connection refused")
		}
		in := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		return true, &authenticationv1.TokenReview{Status: rv.tokenReview(in.Spec)}, nil
	})
	c.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if rv.fail.Load() {
			return true, nil, errors.New("connection refused")
		}
		in := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		return true, &authorizationv1.SubjectAccessReview{Status: rv.accessReview(in.Spec)}, nil
	})
	return c
}

// serve answers one request through g in front of a handler that says "served".
func serve(g *authGate, method, path, authorization string) (int, string, http.Header) {
	h := g.wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "served") }))
	r := httptest.NewRequest(method, path, nil)
	if authorization != "" {
		r.Header.Set("Authorization", authorization)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.String(), w.Header()
}

// TestAuthGateDecisions: the gate's answer for each kind of caller, and that
// neither a refusal nor a failure says why. Also what it asks the API server:
// the token's user, UID, groups and extra, the path, and the verb of the method.
func TestAuthGateDecisions(t *testing.T) {
	rv := newReviewer()
	g := newGate(rv.fakeClient(), logr.Discard())
	for _, tt := range []struct {
		name          string
		method, path  string
		authorization string
		code          int
		body          string
		tr, sar       int // reviews asked
	}{
		{"no token", "GET", "/metrics", "", 401, "Unauthorized\n", 0, 0},
		{"not a bearer token", "GET", "/metrics", "Basic cmVhZGVyLXRva2Vu", 401, "Unauthorized\n", 0, 0},
		{"unknown token", "GET", "/metrics", "Bearer nobody", 401, "Unauthorized\n", 1, 0},
		{"authenticated, not allowed", "GET", "/metrics", "Bearer other-token", 403, "Forbidden\n", 1, 1},
		{"allowed", "GET", "/metrics", "Bearer reader-token", 200, "served", 1, 1},
		{"scheme in any case, spaces around", "GET", "/metrics", "  bearer   reader-token ", 200, "served", 0, 0}, // cached
		{"allowed path, another verb", "POST", "/metrics", "Bearer reader-token", 403, "Forbidden\n", 1, 1},
		{"another path", "GET", "/debug/pprof/", "Bearer reader-token", 403, "Forbidden\n", 1, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tr0, sar0 := rv.counts()
			code, body, hdr := serve(g, tt.method, tt.path, tt.authorization)
			if code != tt.code || body != tt.body {
				t.Errorf("%d %q, want %d %q", code, body, tt.code, tt.body)
			}
			if code == 401 && hdr.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			tr, sar := rv.counts()
			if tr-tr0 != tt.tr || sar-sar0 != tt.sar {
				t.Errorf("asked %d TokenReviews and %d SubjectAccessReviews, want %d and %d", tr-tr0, sar-sar0, tt.tr, tt.sar)
			}
		})
	}
	rv.mu.Lock()
	last := rv.last
	rv.mu.Unlock()
	want := authorizationv1.SubjectAccessReviewSpec{
		User: "system:serviceaccount:mon:prometheus", UID: "u1", Groups: []string{"system:serviceaccounts"},
		Extra:                 map[string]authorizationv1.ExtraValue{"k": {"v"}},
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/debug/pprof/", Verb: "get"},
	}
	if d := diff(want, last); d != "" {
		t.Errorf("last SubjectAccessReview (-want +got):\n%s", d)
	}
	if got := verbOf(http.MethodPost); got != "create" {
		t.Errorf("verb of POST %q, want create", got)
	}

	// The API server cannot answer: 503, logged, not cached.
	var logged strings.Builder
	g = newGate(rv.fakeClient(), funcr.New(func(_, args string) { logged.WriteString(args) }, funcr.Options{}))
	rv.fail.Store(true)
	if code, body, _ := serve(g, "GET", "/metrics", "Bearer reader-token"); code != 503 || body != "Service Unavailable\n" {
		t.Errorf("API server down: %d %q, want 503 Service Unavailable", code, body)
	}
	if !strings.Contains(logged.String(), "connection refused") {
		t.Errorf("log %q, want the error", logged.String())
	}
	rv.fail.Store(false)
	if code, _, _ := serve(g, "GET", "/metrics", "Bearer reader-token"); code != 200 {
		t.Errorf("API server back: %d, want 200 (a failure is not cached)", code)
	}
}

// TestAuthGateCache: a scraper every few seconds costs one TokenReview and one
// SubjectAccessReview per allowedTTL; a refusal is asked again after
// refusedTTL; the cache holds at most decisionLimit answers.
func TestAuthGateCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rv := newReviewer()
		g := newGate(rv.fakeClient(), logr.Discard())
		scrape := func(token string) int {
			code, _, _ := serve(g, "GET", "/metrics", "Bearer "+token)
			return code
		}
		for i := range allowedTTL / (5 * time.Second) {
			if i > 0 {
				time.Sleep(5 * time.Second)
			}
			if code := scrape("reader-token"); code != 200 {
				t.Fatalf("scrape: %d, want 200", code)
			}
		}
		if tr, sar := rv.counts(); tr != 1 || sar != 1 {
			t.Errorf("%v of scrapes every 5s asked %d TokenReviews and %d SubjectAccessReviews, want 1 and 1", allowedTTL, tr, sar)
		}
		time.Sleep(5*time.Second + time.Millisecond)
		scrape("reader-token") // allowedTTL later: asked again
		if tr, sar := rv.counts(); tr != 2 || sar != 2 {
			t.Errorf("after %v: %d TokenReviews and %d SubjectAccessReviews, want 2 and 2", allowedTTL, tr, sar)
		}

		// A refused user whose rights come meanwhile is admitted after refusedTTL.
		if code := scrape("other-token"); code != 403 {
			t.Fatalf("other: %d, want 403", code)
		}
		rv.mu.Lock()
		rv.allowed["system:serviceaccount:default:other"] = []string{"/metrics"}
		rv.mu.Unlock()
		if code := scrape("other-token"); code != 403 {
			t.Errorf("other, granted, within refusedTTL: %d, want the cached 403", code)
		}
		time.Sleep(refusedTTL + time.Millisecond)
		if code := scrape("other-token"); code != 200 {
			t.Errorf("other, granted, after refusedTTL: %d, want 200", code)
		}

		for i := range 2 * decisionLimit {
			g.decisions.Add(decisionKey{verb: "get", path: string(rune(i))}, 200, time.Hour)
		}
		if n := len(g.decisions.Keys()); n != decisionLimit {
			t.Errorf("%d answers cached, want at most %d", n, decisionLimit)
		}
	})
}

// diff is cmp.Diff for the tests of this file.
func diff(want, got any) string {
	w, _ := json.Marshal(want)
	g, _ := json.Marshal(got)
	if string(w) == string(g) {
		return ""
	}
	return "-" + string(w) + "\n+" + string(g)
}

// fakeAPIServer answers TokenReviews and SubjectAccessReviews, in JSON, as rv
// says.
func fakeAPIServer(t *testing.T, rv *reviewer) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/apis/authentication.k8s.io/v1/tokenreviews":
			var in authenticationv1.TokenReview
			json.NewDecoder(r.Body).Decode(&in)
			in.Status = rv.tokenReview(in.Spec)
			in.APIVersion, in.Kind = "authentication.k8s.io/v1", "TokenReview"
			w.WriteHeader(http.StatusCreated)
			json.NewEncoder(w).Encode(&in)
		case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
			var in authorizationv1.SubjectAccessReview
			json.NewDecoder(r.Body).Decode(&in)
			in.Status = rv.accessReview(in.Spec)
			in.APIVersion, in.Kind = "authorization.k8s.io/v1", "SubjectAccessReview"
			w.WriteHeader(http.StatusCreated)
			json.NewEncoder(w).Encode(&in)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// TestServeMetricsSecure: by default the metrics server speaks TLS with a
// self-signed certificate for the loopback addresses, and serves /metrics and
// MetricsHandlers only to a token the API server authenticates and whose user
// it allows; plain HTTP is refused. The pprof server is guarded the same way.
func TestServeMetricsSecure(t *testing.T) {
	rv := newReviewer()
	rv.allowed["system:serviceaccount:mon:prometheus"] = []string{"/metrics", "/extra", "/debug/pprof/"}
	api := fakeAPIServer(t, rv)
	m, err := New(Config{RESTConfig: &rest.Config{Host: api.URL}, HTTP: HTTPConfig{
		MetricsAddress:  "127.0.0.1:0",
		PprofAddress:    "127.0.0.1:0",
		MetricsHandlers: map[string]http.Handler{"/extra": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "extra") })},
	}})
	if err != nil {
		t.Fatal(err)
	}
	worker := &startedRunnable{started: make(chan struct{})}
	if err := m.Add(worker); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	<-worker.started

	var peer *tls.ConnectionState
	tr := &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	do := func(url, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		peer = resp.TLS
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	metrics, pprof := "https://"+m.MetricsAddr(), "https://"+m.PprofAddr()
	for _, tt := range []struct {
		url, token string
		code       int
		in         string
	}{
		{metrics + "/metrics", "", 401, "Unauthorized"},
		{metrics + "/metrics", "forged", 401, "Unauthorized"},
		{metrics + "/metrics", "other-token", 403, "Forbidden"},
		{metrics + "/metrics", "reader-token", 200, "ctrlkit_manager_leader 1"},
		{metrics + "/extra", "other-token", 403, "Forbidden"},
		{metrics + "/extra", "reader-token", 200, "extra"},
		{pprof + "/debug/pprof/", "", 401, "Unauthorized"},
		{pprof + "/debug/pprof/", "other-token", 403, "Forbidden"},
		{pprof + "/debug/pprof/", "reader-token", 200, "goroutine"},
	} {
		code, body := do(tt.url, tt.token)
		if code != tt.code || !strings.Contains(body, tt.in) || strings.Contains(body, "may not") || strings.Contains(body, "secret") {
			t.Errorf("GET %s with token %q: %d %q, want %d with %q and no reason", tt.url, tt.token, code, body[:min(len(body), 200)], tt.code, tt.in)
		}
	}
	if peer == nil || len(peer.PeerCertificates) == 0 {
		t.Fatal("no TLS")
	}
	cert := peer.PeerCertificates[0]
	if err := cert.VerifyHostname("127.0.0.1"); err != nil {
		t.Errorf("self-signed certificate: %v", err)
	}
	if err := cert.VerifyHostname("localhost"); err != nil {
		t.Errorf("self-signed certificate: %v", err)
	}
	if life := cert.NotAfter.Sub(cert.NotBefore); life < selfSignedValidity {
		t.Errorf("self-signed certificate valid for %v, want %v", life, selfSignedValidity)
	}
	if code, _ := get(t, "http://"+m.MetricsAddr()+"/metrics"); code != http.StatusBadRequest {
		t.Errorf("plain HTTP to the metrics server: %d, want 400", code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}

// TestServerBounds: every server bounds its headers, writes and idle
// connections; the pprof server's writes fit its longest profile.
func TestServerBounds(t *testing.T) {
	m := newHTTPManager(t, HTTPConfig{HealthAddress: "127.0.0.1:0", MetricsAddress: "127.0.0.1:0", PprofAddress: "127.0.0.1:0", MaxProfileDuration: 5 * time.Minute, UnsafeInsecureServing: true})
	servers, err := m.httpServers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(servers) != 3 {
		t.Fatalf("%d servers, want 3", len(servers))
	}
	for _, s := range servers {
		hs := s.httpServer(logr.Discard())
		if hs.ReadHeaderTimeout <= 0 || hs.IdleTimeout <= 0 || hs.WriteTimeout <= 0 || hs.MaxHeaderBytes <= 0 || hs.MaxHeaderBytes > 1<<20 {
			t.Errorf("%s server: ReadHeaderTimeout %v, IdleTimeout %v, WriteTimeout %v, MaxHeaderBytes %d: want all bounded", s.name, hs.ReadHeaderTimeout, hs.IdleTimeout, hs.WriteTimeout, hs.MaxHeaderBytes)
		}
		if s.name == "pprof" && hs.WriteTimeout <= 5*time.Minute {
			t.Errorf("pprof server: WriteTimeout %v, want more than the 5m profile it may write", hs.WriteTimeout)
		}
	}
}

// TestProfileDuration: ?seconds of a CPU profile or trace.
func TestProfileDuration(t *testing.T) {
	for _, tt := range []struct {
		seconds string
		limit   time.Duration
		want    time.Duration
		err     bool
	}{
		{"", time.Minute, 30 * time.Second, false},
		{"", 10 * time.Second, 10 * time.Second, false},
		{"60", time.Minute, time.Minute, false},
		{"61", time.Minute, 0, true},
		{"100000000000", time.Minute, 0, true},
		{"0", time.Minute, 0, true},
		{"-5", time.Minute, 0, true},
		{"1.5", time.Minute, 0, true},
		{"x", time.Minute, 0, true},
	} {
		got, err := profileDuration(tt.seconds, tt.limit)
		if got != tt.want || (err != nil) != tt.err {
			t.Errorf("profileDuration(%q, %v) = %v, %v; want %v, error %v", tt.seconds, tt.limit, got, err, tt.want, tt.err)
		}
	}
}

// TestReadinessLogged: the reason a check fails, withheld from /readyz, is
// logged once when a probe finds it, again when it changes, and the check's
// recovery once.
func TestReadinessLogged(t *testing.T) {
	var lines []string
	m, err := New(Config{RESTConfig: &rest.Config{Host: "http://127.0.0.1:1"}, Logger: funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	forbidden := []InformerStatus{{Name: "cms", Health: reflector.Health{State: reflector.StateBackingOff, LastError: errForbidden, ConsecutiveFailures: 1}}}
	m.logReadiness(readinessChecks(false, false, forbidden, nil))
	m.logReadiness(readinessChecks(false, false, forbidden, nil))
	forbidden[0].Health.ConsecutiveFailures = 2
	m.logReadiness(readinessChecks(false, false, forbidden, nil))
	m.logReadiness(readinessChecks(false, false, []InformerStatus{{Name: "cms", Synced: true}}, nil))
	m.logReadiness(readinessChecks(false, false, []InformerStatus{{Name: "cms", Synced: true}}, nil))
	want := []string{
		`"level"=0 "msg"="readiness check fails" "check"="informer/cms" "reason"="not synced (BackingOff, 1 consecutive failures): forbidden: ` + jsonText(errForbidden.Error()) + `"`,
		`"level"=0 "msg"="readiness check fails" "check"="informer/cms" "reason"="not synced (BackingOff, 2 consecutive failures): forbidden: ` + jsonText(errForbidden.Error()) + `"`,
		`"level"=0 "msg"="readiness check passes" "check"="informer/cms"`,
	}
	if d := diff(want, lines); d != "" {
		t.Errorf("logs (-want +got):\n%s", d)
	}
}

// jsonText is s quoted as funcr quotes it, without the quotes.
func jsonText(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}
