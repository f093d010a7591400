package netcut

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// TestCut: before the cut requests pass; the cut breaks a response being
// streamed and fails every later request with ErrCut.
func TestCut(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		if r.URL.Path == "/stream" {
			select { // a watch: open until the client goes
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		}
	}))
	defer srv.Close()
	c := New()
	client, err := rest.HTTPClientFor(c.Wrap(&rest.Config{Host: srv.URL}))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Get(srv.URL + "/ok")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	stream, err := client.Get(srv.URL + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	read := make(chan error, 1)
	go func() { _, err := io.ReadAll(stream.Body); read <- err }()
	c.Cut()
	select {
	case err := <-read:
		if err == nil {
			t.Error("the open stream ended cleanly at the cut")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the open stream was not broken off by the cut")
	}
	if _, err := client.Get(srv.URL + "/ok"); !errors.Is(err, ErrCut) {
		t.Errorf("a request after the cut: %v, want ErrCut", err)
	}
}
