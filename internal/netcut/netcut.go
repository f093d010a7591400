// Package netcut cuts a client off from the API server, for tests of what a
// replica does when its network fails: once cut, every request through the
// wrapped rest.Config fails and every open one (watches included) is broken off.
package netcut

import (
	"context"
	"errors"
	"io"
	"net/http"

	"k8s.io/client-go/rest"
)

// ErrCut is the error of a request made after the cut.
var ErrCut = errors.New("netcut: network cut")

// Cutter is one cut; the zero Cutter is not usable: use New.
type Cutter struct {
	ctx context.Context
	cut context.CancelFunc
}

// New returns a Cutter not yet cut.
func New() *Cutter {
	ctx, cancel := context.WithCancel(context.Background())
	return &Cutter{ctx: ctx, cut: cancel}
}

// Cut cuts every client of Wrap's configs off, for good.
func (c *Cutter) Cut() { c.cut() }

// Wrap returns a copy of cfg whose requests go through the cutter.
func (c *Cutter) Wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return transport{c, rt} })
	return cfg
}

type transport struct {
	c  *Cutter
	rt http.RoundTripper
}

func (t transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.c.ctx.Err() != nil {
		return nil, ErrCut
	}
	ctx, cancel := context.WithCancel(req.Context())
	stop := context.AfterFunc(t.c.ctx, cancel)
	resp, err := t.rt.RoundTrip(req.WithContext(ctx))
	if err != nil {
		stop()
		cancel()
		return nil, err
	}
	resp.Body = &body{ReadCloser: resp.Body, done: func() { stop(); cancel() }}
	return resp, nil
}

type body struct {
	io.ReadCloser
	done func()
}

func (b *body) Close() error {
	err := b.ReadCloser.Close()
	b.done()
	return err
}
