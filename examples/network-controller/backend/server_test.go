package backend

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// newTestServer runs a Server on dir behind httptest and returns it with a client.
func newTestServer(t *testing.T, dir string) (*Server, *Client) {
	t.Helper()
	s, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c, err := NewClient(hs.URL, &http.Client{Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func net1(ns, name, cidr, gw string) Network {
	return Network{Namespace: ns, Name: name, Spec: Spec{CIDR: cidr, Gateway: gw}}
}

func TestPutGetListDelete(t *testing.T) {
	ctx := t.Context()
	_, c := newTestServer(t, t.TempDir())

	if _, err := c.Get(ctx, "ns", "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a missing network = %v, want ErrNotFound", err)
	}
	a := net1("ns", "a", "10.0.0.0/24", "10.0.0.1")
	created, err := c.Put(ctx, a)
	if err != nil || !created {
		t.Fatalf("first Put = %v, %v; want created", created, err)
	}
	// The same spec again: idempotent, not created.
	created, err = c.Put(ctx, a)
	if err != nil || created {
		t.Fatalf("second Put = %v, %v; want existing", created, err)
	}
	// A different spec replaces the old one.
	a.Gateway = "10.0.0.254"
	if created, err = c.Put(ctx, a); err != nil || created {
		t.Fatalf("Put of a new spec = %v, %v; want updated", created, err)
	}
	got, err := c.Get(ctx, "ns", "a")
	if err != nil {
		t.Fatal(err)
	}
	if got != a {
		t.Fatalf("Get = %+v, want %+v", got, a)
	}
	b := net1("another", "b", "192.168.0.0/16", "192.168.0.1")
	if _, err := c.Put(ctx, b); err != nil {
		t.Fatal(err)
	}
	list, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Network{b, a}, list); diff != "" {
		t.Fatalf("List (-want +got):\n%s", diff)
	}
	if err := c.Delete(ctx, "ns", "a"); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, "ns", "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Delete = %v, want ErrNotFound", err)
	}
	if _, err := c.Get(ctx, "ns", "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Delete = %v, want ErrNotFound", err)
	}
}

// TestRestartReloadsState shows that a Server started on the directory of a previous
// one has every change the previous one acknowledged, deletions included.
func TestRestartReloadsState(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	_, c := newTestServer(t, dir)
	for _, n := range []Network{net1("ns", "a", "10.0.0.0/24", "10.0.0.1"), net1("ns", "b", "10.1.0.0/24", "10.1.0.1"), net1("ns", "c", "10.2.0.0/24", "10.2.0.1")} {
		if _, err := c.Put(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Delete(ctx, "ns", "b"); err != nil {
		t.Fatal(err)
	}

	s2, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []Network{net1("ns", "a", "10.0.0.0/24", "10.0.0.1"), net1("ns", "c", "10.2.0.0/24", "10.2.0.1")}
	if diff := cmp.Diff(want, s2.Networks()); diff != "" {
		t.Fatalf("state after restart (-want +got):\n%s", diff)
	}
	// No temporary file is left behind by the atomic writes.
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != StateFile {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("directory holds %q, want only %s", names, StateFile)
	}
}

// TestServeOnLoopback runs the Server with Serve on a real listener, restarts it on
// the same address and directory, and checks the client sees the same state.
func TestServeOnLoopback(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c, err := NewClient("http://"+addr, &http.Client{Transport: tr})
	if err != nil {
		t.Fatal(err)
	}

	serve := func(ln net.Listener) (stop func()) {
		s, err := New(dir)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Serve(ctx, ln) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve = %v", err)
			}
		}
	}
	stop := serve(ln)
	n := net1("ns", "a", "10.0.0.0/24", "10.0.0.1")
	if _, err := c.Put(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	stop()
	tr.CloseIdleConnections()
	if _, err := c.Get(t.Context(), "ns", "a"); err == nil {
		t.Fatal("Get succeeded with the server stopped")
	}

	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	stop = serve(ln)
	defer stop()
	got, err := c.Get(t.Context(), "ns", "a")
	if err != nil {
		t.Fatal(err)
	}
	if got != n {
		t.Fatalf("Get after restart = %+v, want %+v", got, n)
	}
}

func TestFailNext(t *testing.T) {
	ctx := t.Context()
	s, c := newTestServer(t, t.TempDir())
	s.FailNext(2)
	n := net1("ns", "a", "10.0.0.0/24", "10.0.0.1")
	for i := range 2 {
		_, err := c.Put(ctx, n)
		var se *StatusError
		if !errors.As(err, &se) || se.Code != http.StatusInternalServerError {
			t.Fatalf("Put %d = %v, want a 500 *StatusError", i, err)
		}
	}
	if len(s.Networks()) != 0 {
		t.Fatalf("failed Puts changed the state: %+v", s.Networks())
	}
	if _, err := c.Put(ctx, n); err != nil {
		t.Fatalf("Put after the faults = %v", err)
	}
	if got := s.RequestCount("ns", "a"); got != 3 {
		t.Fatalf("RequestCount = %d, want 3", got)
	}
	s.FailNext(5)
	s.FailNext(0)
	if _, err := c.List(ctx); err != nil {
		t.Fatalf("List after FailNext(0) = %v", err)
	}
}

// TestPersistFailure makes the state file impossible to replace and checks that the
// change is refused and not applied in memory.
func TestPersistFailure(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s, c := newTestServer(t, dir)
	// A directory in place of the state file: the rename fails.
	if err := os.Mkdir(filepath.Join(dir, StateFile), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := c.Put(ctx, net1("ns", "a", "10.0.0.0/24", "10.0.0.1"))
	var se *StatusError
	if !errors.As(err, &se) || se.Code != http.StatusInternalServerError || !strings.Contains(se.Message, "persist") {
		t.Fatalf("Put = %v, want a 500 about persisting", err)
	}
	if len(s.Networks()) != 0 {
		t.Fatalf("a change that was not persisted is in memory: %+v", s.Networks())
	}
}

func TestBadRequests(t *testing.T) {
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, path, body string
		code               int
	}{
		{"PUT", "/v1/networks/ns/a", `{"cidr": "10.0.0.0/8"}`, http.StatusBadRequest},
		{"PUT", "/v1/networks/ns/a", `not json`, http.StatusBadRequest},
		{"GET", "/v1/networks/ns", "", http.StatusBadRequest},
		{"GET", "/v1/networks/ns/a/b", "", http.StatusBadRequest},
		{"GET", "/v1/networks/NS/a", "", http.StatusBadRequest},
		{"POST", "/v1/networks/ns/a", "{}", http.StatusMethodNotAllowed},
		{"DELETE", "/v1/networks", "", http.StatusMethodNotAllowed},
		{"GET", "/v2/things", "", http.StatusNotFound},
	} {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body)))
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), `"error"`) {
			t.Errorf("%s %s %s = %d %s, want %d with an error message", tc.method, tc.path, tc.body, rec.Code, rec.Body, tc.code)
		}
	}
	if len(s.Networks()) != 0 {
		t.Fatalf("bad requests changed the state: %+v", s.Networks())
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(""); err == nil {
		t.Error("New(\"\") succeeded")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, StateFile), []byte("{broken"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(dir); err == nil || !strings.Contains(err.Error(), StateFile) {
		t.Errorf("New on a corrupt state file = %v, want an error naming the file", err)
	}
	for _, u := range []string{"", "127.0.0.1:80", "ftp://x", "http://"} {
		if _, err := NewClient(u, nil); err == nil {
			t.Errorf("NewClient(%q) succeeded", u)
		}
	}
}

// TestDeleteOwned: a network remembers the owner it was put for; DeleteOwned
// deletes it only for that owner (atomically in the backend), so a clean-up after
// one owner cannot delete the network re-provisioned for another of the same name.
func TestDeleteOwned(t *testing.T) {
	_, c := newTestServer(t, t.TempDir())
	ctx := t.Context()
	n := Network{Namespace: "ns", Name: "a", Owner: "uid-2", Spec: Spec{CIDR: "10.0.0.0/24", Gateway: "10.0.0.1"}}
	if _, err := c.Put(ctx, n); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, "ns", "a"); err != nil || got.Owner != "uid-2" {
		t.Fatalf("Get = %+v, %v; want owner uid-2", got, err)
	}
	if err := c.DeleteOwned(ctx, "ns", "a", "uid-1"); !errors.Is(err, ErrOwnerMismatch) {
		t.Fatalf("DeleteOwned for another owner = %v, want ErrOwnerMismatch", err)
	}
	if _, err := c.Get(ctx, "ns", "a"); err != nil {
		t.Fatalf("the network of uid-2 is gone after a clean-up for uid-1: %v", err)
	}
	if err := c.DeleteOwned(ctx, "ns", "a", "uid-2"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteOwned(ctx, "ns", "a", "uid-2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("DeleteOwned of a deleted network = %v, want ErrNotFound", err)
	}
}
