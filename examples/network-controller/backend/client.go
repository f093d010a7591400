package backend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// ErrNotFound matches (errors.Is) the error of a Get or Delete of a network the
// backend does not have.
var ErrNotFound = errors.New("backend: network not found")

// ErrOwnerMismatch matches (errors.Is) the error of a DeleteOwned of a network
// that belongs to another owner.
var ErrOwnerMismatch = errors.New("backend: network belongs to another owner")

// StatusError is the error of a request the backend answered with an unexpected
// status code. A 404 on a network also matches ErrNotFound.
type StatusError struct {
	Method string
	URL    string
	Code   int
	// Message is the backend's error message, or the start of its body.
	Message string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("backend: %s %s: %d %s: %s", e.Method, e.URL, e.Code, http.StatusText(e.Code), e.Message)
}

// Is makes a 404 match ErrNotFound and a 412 ErrOwnerMismatch.
func (e *StatusError) Is(target error) bool {
	return target == ErrNotFound && e.Code == http.StatusNotFound ||
		target == ErrOwnerMismatch && e.Code == http.StatusPreconditionFailed
}

// Client talks to a backend Server. The zero value is not usable; create it with
// NewClient. It is safe for concurrent use and holds no connection of its own beyond
// its http.Client's pool.
type Client struct {
	base string // the server's URL without a trailing slash
	hc   *http.Client
}

// NewClient returns a Client of the backend at baseURL (such as
// "http://127.0.0.1:8080"), sending requests through hc (nil means
// http.DefaultClient). Every request is bounded by the context of the call only: set
// hc.Timeout or use context deadlines.
func NewClient(baseURL string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("backend: base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("backend: base URL %q: want http(s)://host[:port]", baseURL)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: strings.TrimSuffix(baseURL, "/"), hc: hc}, nil
}

// Get returns the network namespace/name, or an error matching ErrNotFound.
func (c *Client) Get(ctx context.Context, namespace, name string) (Network, error) {
	var n Network
	_, err := c.do(ctx, http.MethodGet, c.path(namespace, name), nil, &n)
	return n, err
}

// List returns every network, sorted by namespace and name.
func (c *Client) List(ctx context.Context) ([]Network, error) {
	var list []Network
	_, err := c.do(ctx, http.MethodGet, c.base+"/v1/networks", nil, &list)
	return list, err
}

// Put creates the network n or replaces its spec and owner. It reports whether it was
// created. Putting the same network twice is harmless.
func (c *Client) Put(ctx context.Context, n Network) (created bool, err error) {
	body, err := json.Marshal(n.Spec)
	if err != nil {
		return false, fmt.Errorf("backend: %w", err)
	}
	code, err := c.do(ctx, http.MethodPut, c.path(n.Namespace, n.Name)+"?owner="+url.QueryEscape(n.Owner), body, nil)
	return code == http.StatusCreated, err
}

// Delete deletes the network namespace/name, whoever owns it; it returns an error
// matching ErrNotFound if there was none.
func (c *Client) Delete(ctx context.Context, namespace, name string) error {
	_, err := c.do(ctx, http.MethodDelete, c.path(namespace, name), nil, nil)
	return err
}

// DeleteOwned deletes the network namespace/name only if it belongs to owner (its
// Owner), atomically in the backend; it returns an error matching ErrNotFound if
// there was none, and ErrOwnerMismatch if it belongs to another.
func (c *Client) DeleteOwned(ctx context.Context, namespace, name, owner string) error {
	_, err := c.do(ctx, http.MethodDelete, c.path(namespace, name)+"?owner="+url.QueryEscape(owner), nil, nil)
	return err
}

func (c *Client) path(namespace, name string) string {
	return c.base + "/v1/networks/" + url.PathEscape(namespace) + "/" + url.PathEscape(name)
}

// do sends a request and decodes a 2xx answer into out (if not nil). Any other
// status becomes a *StatusError.
func (c *Client) do(ctx context.Context, method, u string, body []byte, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, fmt.Errorf("backend: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("backend: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("backend: %s %s: reading answer: %w", method, u, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		var eb errorBody
		msg := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &eb) == nil && eb.Error != "" {
			msg = eb.Error
		}
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return resp.StatusCode, &StatusError{Method: method, URL: u, Code: resp.StatusCode, Message: msg}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("backend: %s %s: decoding answer: %w", method, u, err)
		}
	}
	return resp.StatusCode, nil
}
