package backend

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// StateFile is the name of the file, in the directory given to New, that holds a
// Server's networks.
const StateFile = "networks.json"

// maxBody bounds the request bodies the Server reads.
const maxBody = 64 << 10

// Network is one network of the backend.
type Network struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Owner names what the network was made for (the UID of a Network
	// object), "" if nobody said; a Delete can be made conditional on it.
	Owner string `json:"owner,omitempty"`
	Spec
}

// Spec is what a network is made of. The backend stores the strings as given.
type Spec struct {
	CIDR    string `json:"cidr"`
	Gateway string `json:"gateway"`
}

// Key returns "namespace/name".
func (n Network) Key() string { return n.Namespace + "/" + n.Name }

// Server is the backend service. Create it with New; it is an http.Handler, and Serve
// runs it on a listener. It is safe for concurrent use. The zero value is not usable.
//
// Cost: the whole state is in memory and rewritten to disk on every change, which
// suits the few hundred networks of an example.
type Server struct {
	dir string

	mu sync.Mutex
	// networks is the state, keyed by Network.Key; it equals the content of the state
	// file except while persist is writing a change (under mu).
	networks map[string]Network
	// failNext is how many of the next requests fail with 500.
	failNext int
	// requests counts the requests per network key (those naming one network).
	requests map[string]int
}

// New returns a Server keeping its state in dir, which is created if missing, and
// loads the state a previous Server left there. It starts no goroutine.
func New(dir string) (*Server, error) {
	if dir == "" {
		return nil, errors.New("backend: empty state directory")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("backend: %w", err)
	}
	s := &Server{dir: dir, networks: map[string]Network{}, requests: map[string]int{}}
	data, err := os.ReadFile(filepath.Join(dir, StateFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("backend: %w", err)
	}
	var list []Network
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("backend: state file %s: %w", filepath.Join(dir, StateFile), err)
	}
	for _, n := range list {
		s.networks[n.Key()] = n
	}
	return s, nil
}

// Serve answers requests on ln until ctx ends, then shuts down: it stops accepting,
// waits up to five seconds for requests in progress, and closes ln. It returns nil
// after a shutdown caused by ctx, or the error that stopped the server otherwise.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("backend: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := hs.Shutdown(sctx)
	if err != nil {
		hs.Close()
	}
	<-done // http.ErrServerClosed
	if err != nil {
		return fmt.Errorf("backend: shutdown: %w", err)
	}
	return nil
}

// FailNext makes the next n requests fail with 500 Internal Server Error, without
// reading or changing the state. n <= 0 cancels earlier calls.
func (s *Server) FailNext(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext = max(n, 0)
}

// RequestCount returns how many requests named the network namespace/name (GET, PUT
// or DELETE on its path, failed ones included) since New.
func (s *Server) RequestCount(namespace, name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[namespace+"/"+name]
}

// Networks returns a copy of the state, sorted by namespace and name.
func (s *Server) Networks() []Network {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listLocked()
}

// listLocked returns the networks sorted by key. It requires mu held.
func (s *Server) listLocked() []Network {
	list := make([]Network, 0, len(s.networks))
	for _, n := range s.networks {
		list = append(list, n)
	}
	slices.SortFunc(list, func(a, b Network) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return list
}

// persistLocked writes the state with next in place of the current one (a nil
// *Network removes key) and, once the file is renamed into place, applies it in
// memory. It requires mu held.
func (s *Server) persistLocked(key string, next *Network) error {
	state := make(map[string]Network, len(s.networks)+1)
	for k, n := range s.networks {
		state[k] = n
	}
	if next == nil {
		delete(state, key)
	} else {
		state[key] = *next
	}
	list := make([]Network, 0, len(state))
	for _, n := range state {
		list = append(list, n)
	}
	slices.SortFunc(list, func(a, b Network) int { return strings.Compare(a.Key(), b.Key()) })
	data, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(s.dir, StateFile), data); err != nil {
		return err
	}
	s.networks = state
	return nil
}

// writeFileAtomic replaces path with data: readers see the old content or the new,
// never a partial file, also after a crash.
func writeFileAtomic(path string, data []byte) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(f.Name())
		}
	}()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	// Make the rename itself durable; not every platform can sync a directory.
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// ServeHTTP answers one request of the API in the package documentation.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	const prefix = "/v1/networks"
	path := r.URL.Path
	if path == prefix || path == prefix+"/" {
		if r.Method != http.MethodGet {
			writeError(w, http.StatusMethodNotAllowed, "method %s not allowed on %s", r.Method, path)
			return
		}
		s.mu.Lock()
		if s.injectFaultLocked() {
			s.mu.Unlock()
			writeError(w, http.StatusInternalServerError, "injected fault")
			return
		}
		list := s.listLocked()
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, list)
		return
	}
	rest, ok := strings.CutPrefix(path, prefix+"/")
	if !ok {
		writeError(w, http.StatusNotFound, "no such path %s", path)
		return
	}
	namespace, name, ok := strings.Cut(rest, "/")
	if !ok || !validSegment(namespace) || !validSegment(name) {
		writeError(w, http.StatusBadRequest, "path %s does not name a network as /v1/networks/{namespace}/{name}", path)
		return
	}
	var spec Spec
	if r.Method == http.MethodPut {
		// Read the body before taking the lock: a slow client must not hold it.
		if err := json.NewDecoder(io.LimitReader(r.Body, maxBody)).Decode(&spec); err != nil {
			writeError(w, http.StatusBadRequest, "bad body: %v", err)
			return
		}
		if spec.CIDR == "" || spec.Gateway == "" {
			writeError(w, http.StatusBadRequest, "cidr and gateway are required")
			return
		}
	}
	key := namespace + "/" + name
	owner, conditional := r.URL.Query()["owner"]

	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests[key]++
	if s.injectFaultLocked() {
		writeError(w, http.StatusInternalServerError, "injected fault")
		return
	}
	cur, exists := s.networks[key]
	switch r.Method {
	case http.MethodGet:
		if !exists {
			writeError(w, http.StatusNotFound, "network %s not found", key)
			return
		}
		writeJSON(w, http.StatusOK, cur)
	case http.MethodPut:
		next := Network{Namespace: namespace, Name: name, Spec: spec}
		if conditional {
			next.Owner = owner[0]
		}
		if exists && cur == next {
			writeJSON(w, http.StatusOK, cur)
			return
		}
		if err := s.persistLocked(key, &next); err != nil {
			writeError(w, http.StatusInternalServerError, "persist: %v", err)
			return
		}
		code := http.StatusOK
		if !exists {
			code = http.StatusCreated
		}
		writeJSON(w, code, next)
	case http.MethodDelete:
		if !exists {
			writeError(w, http.StatusNotFound, "network %s not found", key)
			return
		}
		if conditional && cur.Owner != owner[0] {
			writeError(w, http.StatusPreconditionFailed, "network %s belongs to %q, not %q", key, cur.Owner, owner[0])
			return
		}
		if err := s.persistLocked(key, nil); err != nil {
			writeError(w, http.StatusInternalServerError, "persist: %v", err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		writeError(w, http.StatusMethodNotAllowed, "method %s not allowed on %s", r.Method, path)
	}
}

// injectFaultLocked reports whether this request must fail, and counts it. It
// requires mu held.
func (s *Server) injectFaultLocked() bool {
	if s.failNext > 0 {
		s.failNext--
		return true
	}
	return false
}

// validSegment reports whether s can be a namespace or name: what Kubernetes allows
// for both (a DNS label or subdomain) is a subset of this.
func validSegment(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

type errorBody struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, errorBody{Error: fmt.Sprintf(format, args...)})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}
