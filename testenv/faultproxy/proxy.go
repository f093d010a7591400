package faultproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// Config configures a Proxy. The zero value forwards everything unchanged with seed 0.
type Config struct {
	// Rules are the faults in force from the start; see Rule for how one is chosen.
	Rules []Rule
	// Seed drives every random choice (see the package documentation).
	Seed uint64
}

// Rule is the set of faults applied to the requests of one resource. For a request, the
// first rule of the list whose Resource matches applies, and only that one. The zero
// Rule matches every resource and injects nothing.
type Rule struct {
	// Resource is the resource's plural name, followed for a named API group by "." and
	// the group: "configmaps", "deployments.apps", "podsets.example.com". "" matches
	// every resource.
	Resource string
	// DelayWatchEvents delays each watch event, bookmarks included.
	DelayWatchEvents Delay
	// HoldWatchEvents buffers every watch event that arrives while it is set until
	// Proxy.Release (or SetRules, or Close) frees it.
	HoldWatchEvents bool
	// DropWatchAfter breaks watch connections.
	DropWatchAfter Drop
	// Status answers requests with an error instead of forwarding them.
	Status Status
	// StaleList serves LISTs of the latest state from an older resourceVersion.
	StaleList Stale
}

// Delay releases each watch event at its arrival plus a random delay in [Min, Max], and
// never before the event before it. Zero Min and Max mean no delay; Max below Min is
// taken as Min.
type Delay struct {
	Min, Max time.Duration
}

// Drop breaks a watch connection once Events events (bookmarks included) have been
// written to the client, or After has passed since the watch started, whichever comes
// first. The client sees the connection end in the middle of the stream, as when a
// network path or the server breaks. Zero fields mean never. The rule in force when the
// watch starts decides.
type Drop struct {
	Events int
	After  time.Duration
}

// Status answers a request with Code and a metav1.Status body (JSON) instead of
// forwarding it, with probability Probability, when its verb is one of Verbs ("get",
// "list", "watch", "create", "update", "patch", "delete"; empty means every verb).
// A 429 answer carries "Retry-After: 1". Code 0 means no status is injected.
type Status struct {
	Code        int
	Probability float64
	Verbs       []string
}

// Stale rewrites a LIST that asks for the latest state (resourceVersion "", no continue
// token) into a LIST of an older resourceVersion the proxy has seen for the resource,
// with resourceVersionMatch=Exact. The proxy remembers the resourceVersions of the LIST
// answers and watch events it forwards (JSON and protobuf).
//
// Versions > 0 picks the resourceVersion that many steps before the newest one seen;
// otherwise By > 0 picks the newest one seen at least By ago. When none fits (too
// little history) the LIST is forwarded unchanged and not counted. When etcd has
// compacted the chosen revision the server answers 410 Gone, as it would for any
// client asking for it.
type Stale struct {
	By       time.Duration
	Versions int
}

func (s Stale) enabled() bool { return s.By > 0 || s.Versions > 0 }

// Stats counts the faults a Proxy injected for one resource.
type Stats struct {
	// Delayed counts watch events released later than they arrived by a Delay.
	Delayed int64
	// Held counts watch events held by HoldWatchEvents.
	Held int64
	// DroppedWatches counts watch connections broken by DropWatchAfter.
	DroppedWatches int64
	// Statuses counts requests answered by an injected Status.
	Statuses int64
	// StaleLists counts LISTs rewritten to an older resourceVersion.
	StaleLists int64
}

// Proxy is a running fault proxy. Its methods are safe for concurrent use. Create it
// with Start and stop it with Close.
//
// Cost: one goroutine per connection (net/http), plus one per watch stream that reads
// the upstream while the handler writes; the events of a stream wait in memory until
// released, and each LIST answer is buffered whole to read its resourceVersion.
type Proxy struct {
	seed     uint64
	upstream *url.URL
	client   *http.Client
	srv      *http.Server
	ln       net.Listener
	url      string
	done     chan struct{} // closed by Close
	served   chan struct{} // closed when Serve has returned
	work     sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	rules     []Rule
	resources map[string]*resource // by resource key
	// release is closed and replaced to wake streams waiting for held events.
	release chan struct{}
}

// resource is the proxy's state for one resource key. Requires Proxy.mu held for
// every field.
type resource struct {
	stats    Stats
	requests *rand.Rand // status decisions, one draw per request that a Status rule covers
	watches  uint64     // watch streams started so far
	releases uint64     // Release calls so far; an event held at n is free once releases > n
	history  []seen     // resourceVersions seen, ascending, at most historyLimit
}

// seen is a resourceVersion the proxy forwarded and when.
type seen struct {
	at time.Time
	rv string
}

// historyLimit bounds the resourceVersions remembered per resource.
const historyLimit = 4096

// Start listens on 127.0.0.1 on a free port and serves the proxy in a goroutine of its
// own until Close. Requests go to upstream's server with upstream's transport and
// credentials. ctx bounds only the start.
func Start(ctx context.Context, upstream *rest.Config, cfg Config) (*Proxy, error) {
	if upstream == nil {
		return nil, errors.New("faultproxy: nil upstream config")
	}
	if err := validate(cfg.Rules); err != nil {
		return nil, err
	}
	base, _, err := rest.DefaultServerUrlFor(upstream)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: upstream %q: %w", upstream.Host, err)
	}
	client, err := rest.HTTPClientFor(upstream)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: upstream transport: %w", err)
	}
	c := *client
	c.Timeout = 0 // watches last as long as they last
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{
		seed:      cfg.Seed,
		upstream:  base,
		client:    &c,
		ln:        ln,
		url:       "http://" + ln.Addr().String(),
		done:      make(chan struct{}),
		served:    make(chan struct{}),
		rules:     slices.Clone(cfg.Rules),
		resources: map[string]*resource{},
		release:   make(chan struct{}),
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serveHTTP), ReadHeaderTimeout: 30 * time.Second}
	go func() {
		defer close(p.served)
		_ = p.srv.Serve(ln) // ends with ErrServerClosed at Close
	}()
	return p, nil
}

func validate(rules []Rule) error {
	for i, r := range rules {
		if r.DelayWatchEvents.Min < 0 || r.DelayWatchEvents.Max < 0 {
			return fmt.Errorf("faultproxy: rule %d (%q): negative delay", i, r.Resource)
		}
		if r.DropWatchAfter.Events < 0 || r.DropWatchAfter.After < 0 {
			return fmt.Errorf("faultproxy: rule %d (%q): negative DropWatchAfter", i, r.Resource)
		}
		if c := r.Status.Code; c != 0 && (c < 400 || c > 599) {
			return fmt.Errorf("faultproxy: rule %d (%q): status code %d is not an error code", i, r.Resource, c)
		}
		if p := r.Status.Probability; p < 0 || p > 1 {
			return fmt.Errorf("faultproxy: rule %d (%q): probability %v outside [0, 1]", i, r.Resource, p)
		}
		if r.StaleList.By < 0 || r.StaleList.Versions < 0 {
			return fmt.Errorf("faultproxy: rule %d (%q): negative StaleList", i, r.Resource)
		}
	}
	return nil
}

// URL returns the proxy's base URL, "http://127.0.0.1:port".
func (p *Proxy) URL() string { return p.url }

// Config returns a rest.Config for clients of the proxy: its URL, no TLS and no
// credentials (the proxy authenticates as the upstream config does).
func (p *Proxy) Config() *rest.Config {
	return &rest.Config{Host: p.url, QPS: -1}
}

// SetRules replaces the rules. Requests and watch events that arrive afterwards follow
// the new ones; a watch keeps the DropWatchAfter it started with. Every held event is
// released.
func (p *Proxy) SetRules(rules []Rule) error {
	if err := validate(rules); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = slices.Clone(rules)
	p.releaseLocked("")
	return nil
}

// Release frees the watch events of resource (a key as in Rule.Resource; "" for every
// resource) held so far. Events that arrive later are held again while a rule says so.
func (p *Proxy) Release(resource string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.releaseLocked(resource)
}

// releaseLocked requires p.mu held.
func (p *Proxy) releaseLocked(key string) {
	for k, r := range p.resources {
		if key == "" || k == key {
			r.releases++
		}
	}
	close(p.release)
	p.release = make(chan struct{})
}

// Stats returns the counters of every resource the proxy has seen a request for.
func (p *Proxy) Stats() map[string]Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]Stats, len(p.resources))
	for k, r := range p.resources {
		out[k] = r.stats
	}
	return out
}

// Close stops the proxy: it stops accepting connections, ends every request and watch
// in progress, and returns once none of its goroutines runs. Later calls do nothing.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	p.mu.Unlock()
	err := p.srv.Close()
	<-p.served
	p.work.Wait()
	p.client.CloseIdleConnections()
	if err != nil {
		return fmt.Errorf("faultproxy: close: %w", err)
	}
	return nil
}

// resourceLocked returns the state of key, creating it. Requires p.mu held.
func (p *Proxy) resourceLocked(key string) *resource {
	r := p.resources[key]
	if r == nil {
		r = &resource{requests: rand.New(rand.NewPCG(p.seed, hashKey(key, 0)))}
		p.resources[key] = r
	}
	return r
}

// ruleLocked returns the rule for key. Requires p.mu held.
func (p *Proxy) ruleLocked(key string) Rule {
	for _, r := range p.rules {
		if r.Resource == "" || r.Resource == key {
			return r
		}
	}
	return Rule{Resource: key}
}

func hashKey(key string, n uint64) uint64 {
	h := fnv.New64a()
	_, _ = io.WriteString(h, key)
	return h.Sum64() ^ (n * 0x9e3779b97f4a7c15)
}

// request is what the proxy reads from a request's path and query.
type request struct {
	key  string // resource key, "" when the path names no resource
	verb string // get, list, watch, create, update, patch, delete, or the method
}

// parseRequest reads the resource and verb of a request to the Kubernetes API.
func parseRequest(r *http.Request) request {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	var group string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		group, parts = parts[1], parts[3:]
	default:
		return request{verb: strings.ToLower(r.Method)}
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:] // a namespaced resource; "namespaces/x" alone is a namespace
	}
	if len(parts) == 0 {
		return request{verb: strings.ToLower(r.Method)}
	}
	key := parts[0]
	if group != "" {
		key += "." + group
	}
	named := len(parts) >= 2
	verb := strings.ToLower(r.Method)
	switch r.Method {
	case http.MethodGet:
		switch {
		case isTrue(r.URL.Query().Get("watch")):
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	}
	return request{key: key, verb: verb}
}

func isTrue(s string) bool {
	b, err := strconv.ParseBool(s)
	return err == nil && b
}

// hopHeaders are not forwarded in either direction; Authorization and Accept-Encoding
// are set by the upstream transport.
var hopHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Authorization", "Accept-Encoding",
}

func (p *Proxy) serveHTTP(w http.ResponseWriter, r *http.Request) {
	p.work.Add(1)
	defer p.work.Done()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	p.work.Add(1)
	go func() { // Close ends the request
		defer p.work.Done()
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()

	req := parseRequest(r)
	var rule Rule
	var gen uint64
	if req.key != "" {
		p.mu.Lock()
		res := p.resourceLocked(req.key)
		rule = p.ruleLocked(req.key)
		if s := rule.Status; s.Code != 0 && (len(s.Verbs) == 0 || slices.Contains(s.Verbs, req.verb)) {
			// One draw per covered request keeps the sequence independent of Probability.
			if res.requests.Float64() < s.Probability {
				res.stats.Statuses++
				p.mu.Unlock()
				writeStatus(w, s.Code, req)
				return
			}
		}
		if req.verb == "list" && rule.StaleList.enabled() {
			if rv, ok := pickStale(res.history, rule.StaleList, time.Now()); ok && rewriteStale(r.URL, rv) {
				res.stats.StaleLists++
				req.verb = "stale-list" // its answer is not fresh history
			}
		}
		if req.verb == "watch" {
			gen = res.watches
			res.watches++
		}
		p.mu.Unlock()
	}

	out, err := http.NewRequestWithContext(ctx, r.Method, p.target(r.URL), r.Body)
	if err != nil {
		writeError(w, http.StatusBadGateway, fmt.Sprintf("faultproxy: %v", err))
		return
	}
	out.ContentLength = r.ContentLength
	out.Header = r.Header.Clone()
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	resp, err := p.client.Do(out)
	if err != nil {
		writeError(w, http.StatusBadGateway, fmt.Sprintf("faultproxy: upstream: %v", err))
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	for _, h := range hopHeaders {
		w.Header().Del(h)
	}

	switch {
	case req.verb == "watch" && resp.StatusCode == http.StatusOK:
		w.Header().Del("Content-Length")
		p.stream(ctx, w, resp, req.key, rule, gen)
	case req.verb == "list" && resp.StatusCode == http.StatusOK:
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			panic(http.ErrAbortHandler) // the upstream broke; so does the answer
		}
		if rv, ok := listRV(resp.Header.Get("Content-Type"), body); ok {
			p.observe(req.key, rv)
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(body)
	default:
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}
}

// target is the upstream URL of a request to the proxy.
func (p *Proxy) target(u *url.URL) string {
	t := *p.upstream
	t.Path = strings.TrimSuffix(t.Path, "/") + u.Path
	t.RawPath = ""
	t.RawQuery = u.RawQuery
	return t.String()
}

// rewriteStale turns a LIST of the latest state into a LIST of rv; it reports false
// when the LIST asks for something else (a resourceVersion, a continue token).
func rewriteStale(u *url.URL, rv string) bool {
	q := u.Query()
	if q.Get("resourceVersion") != "" || q.Get("continue") != "" {
		return false
	}
	q.Set("resourceVersion", rv)
	q.Set("resourceVersionMatch", string(metav1.ResourceVersionMatchExact))
	u.RawQuery = q.Encode()
	return true
}

// writeStatus answers an injected error the way kube-apiserver answers its own.
func writeStatus(w http.ResponseWriter, code int, req request) {
	if code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	writeError(w, code, fmt.Sprintf("faultproxy: injected %d for %s %s", code, req.verb, req.key))
}

func writeError(w http.ResponseWriter, code int, msg string) {
	st := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  msg,
		Reason:   reasonFor(code),
		Code:     int32(code),
	}
	if code == http.StatusTooManyRequests {
		st.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
	}
	body, _ := json.Marshal(st) // a Status always marshals
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

func reasonFor(code int) metav1.StatusReason {
	switch code {
	case http.StatusGone:
		return metav1.StatusReasonExpired
	case http.StatusTooManyRequests:
		return metav1.StatusReasonTooManyRequests
	case http.StatusInternalServerError:
		return metav1.StatusReasonInternalError
	case http.StatusServiceUnavailable:
		return metav1.StatusReasonServiceUnavailable
	case http.StatusConflict:
		return metav1.StatusReasonConflict
	case http.StatusNotFound:
		return metav1.StatusReasonNotFound
	case http.StatusForbidden:
		return metav1.StatusReasonForbidden
	case http.StatusGatewayTimeout:
		return metav1.StatusReasonTimeout
	}
	return metav1.StatusReasonUnknown
}
