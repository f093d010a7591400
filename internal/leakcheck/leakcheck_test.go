package leakcheck

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, Options()...) }

// A goroutine blocked in Accept on a listener that is never closed is a leak; once the
// listener is closed and the goroutine ends, the check passes.
func TestCheckCatchesALeakedListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	err = Check()
	if err == nil || !strings.Contains(err.Error(), "Accept") {
		t.Errorf("Check with a listener left accepting = %v, want a leak in Accept", err)
	}
	ln.Close()
	<-done
	if err := Check(); err != nil {
		t.Fatalf("Check after the listener closed: %v", err)
	}
}

// A server left serving is a leak, and so is a connection it holds open for a client; a
// server closed, with the client's idle connections, leaves nothing.
func TestCheckCatchesALeakedServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	client := &http.Client{Transport: &http.Transport{}}
	resp, err := client.Get("http://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	err = Check()
	for _, want := range []string{"net/http.(*Server).Serve", "net/http.(*conn).serve", "net/http.(*persistConn).readLoop"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check with a server left serving a kept-alive connection = %v, want a leak in %s", err, want)
		}
	}
	client.CloseIdleConnections()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve = %v", err)
	}
	if err := Check(); err != nil {
		t.Fatalf("Check after the server and the idle connections closed: %v", err)
	}
}

// An httptest server closed at the end of a test leaves nothing, with the idle connections
// of its client, which Close ends.
func TestCheckPassesAfterHTTPTestServerClose(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	srv.Close()
	if err := Check(); err != nil {
		t.Fatalf("Check after httptest.Server.Close: %v", err)
	}
}
