package faultproxy

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
)

const (
	token      = "secret-token"
	protoWatch = "application/vnd.kubernetes.protobuf;stream=watch"
)

// fakeAPI speaks enough of the Kubernetes API for the proxy: LISTs of configmaps
// (JSON) and podsets.example.com (protobuf) answered with resourceVersion rv, and
// watches of both whose events the test sends with send. It refuses requests without
// the bearer token.
type fakeAPI struct {
	srv    *httptest.Server
	frames chan []byte // frames for the open watch
	ended  chan struct{}

	mu       sync.Mutex
	rv       int
	requests []*url.URL
}

func newFakeAPI(t *testing.T) *fakeAPI {
	t.Helper()
	f := &fakeAPI{frames: make(chan []byte), ended: make(chan struct{}), rv: 10}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		close(f.ended)
		f.srv.Close()
	})
	return f
}

func (f *fakeAPI) config() *rest.Config { return &rest.Config{Host: f.srv.URL, BearerToken: token} }

func (f *fakeAPI) setRV(rv int) {
	f.mu.Lock()
	f.rv = rv
	f.mu.Unlock()
}

// seenQueries returns the queries of the requests it answered.
func (f *fakeAPI) seenQueries() []url.Values {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []url.Values
	for _, u := range f.requests {
		out = append(out, u.Query())
	}
	return out
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+token {
		http.Error(w, "no token", http.StatusUnauthorized)
		return
	}
	f.mu.Lock()
	f.requests = append(f.requests, r.URL)
	rv := f.rv
	f.mu.Unlock()
	proto := r.URL.Path == "/apis/example.com/v1/podsets"
	if r.URL.Query().Get("watch") != "" {
		if proto {
			w.Header().Set("Content-Type", protoWatch)
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for {
			select {
			case b := <-f.frames:
				_, _ = w.Write(b)
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			case <-f.ended:
				return
			}
		}
	}
	if proto {
		w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf")
		l := metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: fmt.Sprint(rv)}}
		_, _ = w.Write(envelope(mustMarshal(l.Marshal())))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"kind":"ConfigMapList","metadata":{"resourceVersion":"%d"},"items":[]}`, rv)
}

// send hands one frame to the open watch.
func (f *fakeAPI) send(t *testing.T, b []byte) {
	t.Helper()
	select {
	case f.frames <- b:
	case <-time.After(10 * time.Second):
		t.Fatal("no watch to send to")
	}
}

func mustMarshal(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// envelope wraps a protobuf message as kube-apiserver does: "k8s\x00" and a
// runtime.Unknown.
func envelope(raw []byte) []byte {
	u := runtime.Unknown{Raw: raw, ContentType: "application/vnd.kubernetes.protobuf"}
	return append([]byte("k8s\x00"), mustMarshal(u.Marshal())...)
}

// jsonEvent is a JSON watch event of an object named name at resourceVersion rv.
func jsonEvent(typ, name string, rv int) []byte {
	return fmt.Appendf(nil, `{"type":%q,"object":{"kind":"ConfigMap","metadata":{"name":%q,"resourceVersion":"%d"}}}`+"\n", typ, name, rv)
}

// protoEvent is a length-prefixed protobuf watch event.
func protoEvent(typ, name string, rv int) []byte {
	o := metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: fmt.Sprint(rv)}}
	e := metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: envelope(mustMarshal(o.Marshal()))}}
	msg := mustMarshal(e.Marshal())
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(msg))), msg...)
}

// received is a frame the client read and when.
type received struct {
	data string
	at   time.Time
}

// watch opens a watch through the proxy and returns the frames it reads, and the
// error that ends the stream (nil for a clean end) once the channel is closed.
func watch(t *testing.T, p *Proxy, path string, proto bool) (<-chan received, *error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, p.URL()+path+"?watch=true", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("watch %s: %s", path, resp.Status)
	}
	out := make(chan received, 100)
	var end error
	split := splitLine
	if proto {
		split = splitLength
	}
	go func() {
		defer close(out)
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		for {
			b, err := split(br)
			if err != nil {
				if err != io.EOF {
					end = err
				}
				return
			}
			out <- received{data: string(b), at: time.Now()}
		}
	}()
	t.Cleanup(func() {
		resp.Body.Close()
		for range out {
		}
	})
	return out, &end
}

// next returns the next frame, failing after d.
func next(t *testing.T, ch <-chan received, d time.Duration) received {
	t.Helper()
	select {
	case r, ok := <-ch:
		if !ok {
			t.Fatal("stream ended")
		}
		return r
	case <-time.After(d):
		t.Fatalf("no frame within %v", d)
	}
	return received{}
}

// waitEnd waits for the stream to end and returns its error.
func waitEnd(t *testing.T, ch <-chan received, end *error) error {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case r, ok := <-ch:
			if !ok {
				return *end
			}
			t.Errorf("unexpected frame %q", r.data)
		case <-timeout:
			t.Fatal("stream did not end")
		}
	}
}

// start starts a proxy in front of f and closes it at the end of the test.
func start(t *testing.T, f *fakeAPI, cfg Config) *Proxy {
	t.Helper()
	p, err := Start(t.Context(), f.config(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

// get sends a GET through the proxy and returns the status, headers and body.
func get(t *testing.T, p *Proxy, path string) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.Get(p.URL() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// waitStats polls until ok holds for the stats of key.
func waitStats(t *testing.T, p *Proxy, key string, ok func(Stats) bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for !ok(p.Stats()[key]) {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("stats of %s: %+v", key, p.Stats()[key])
		}
	}
}

func decodeStatus(t *testing.T, b []byte) metav1.Status {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("body %q: %v", b, err)
	}
	return st
}
