package testenv

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"syscall"
	"time"
)

// Compact compacts etcd's history up to its current revision and returns that revision.
// Afterwards a watch or list that asks etcd for an older resourceVersion is answered with
// 410 Gone. The API server's watch cache may still answer recent resourceVersions from
// memory; restart the API server, or run it with a disabled watch cache for the resource
// ("--watch-cache-sizes=configmaps#0"), to make every older version fail.
//
// Compact talks to etcd's JSON gateway, so it needs no etcd client library.
func (e *Env) Compact(ctx context.Context) (int64, error) {
	var rng struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	// Any key will do: the response header carries the store's current revision.
	if err := e.etcdPost(ctx, "/v3/kv/range", map[string]any{"key": "AA==", "limit": 1}, &rng); err != nil {
		return 0, err
	}
	rev, err := strconv.ParseInt(rng.Header.Revision, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("testenv: etcd revision %q: %w", rng.Header.Revision, err)
	}
	body := map[string]any{"revision": strconv.FormatInt(rev, 10), "physical": true}
	if err := e.etcdPost(ctx, "/v3/kv/compaction", body, nil); err != nil {
		return 0, err
	}
	return rev, nil
}

// Expire makes the resourceVersions the API server served so far unusable, so that
// its watchers must list again: it writes three times to etcd (under a key of its
// own, outside the API server's data), compacts etcd's history up to there, and
// restarts the API server with SIGKILL, whose new watch cache starts at the current
// revision. A watch or a LIST from an older resourceVersion is then answered with 410
// Gone; a reflector or informer relists. The writes put the last served version more
// than one revision behind, because etcd serves a watch from the revision after the
// one asked for. A client that reconnects quickly can, rarely, resume its watch
// anyway; a test that needs a relist checks for it and calls Expire again.
func (e *Env) Expire(ctx context.Context) error {
	for i := range 3 {
		kv := map[string]any{
			"key":   base64.StdEncoding.EncodeToString([]byte("/ctrlkit-testenv/expire")),
			"value": base64.StdEncoding.EncodeToString([]byte(strconv.Itoa(i))),
		}
		if err := e.etcdPost(ctx, "/v3/kv/put", kv, nil); err != nil {
			return err
		}
	}
	if _, err := e.Compact(ctx); err != nil {
		return err
	}
	return e.RestartAPIServer(ctx, syscall.SIGKILL)
}

func (e *Env) etcdPost(ctx context.Context, path string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("testenv: etcd %s: %w", path, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.etcdURL+path, bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("testenv: etcd %s: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("testenv: etcd %s: %w", path, err)
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("testenv: etcd %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("testenv: etcd %s: %s: %s", path, resp.Status, bytes.TrimSpace(rb))
	}
	if out != nil {
		if err := json.Unmarshal(rb, out); err != nil {
			return fmt.Errorf("testenv: etcd %s: decode %q: %w", path, rb, err)
		}
	}
	return nil
}

// httpGet fetches url and returns its body if the status is 200.
func httpGet(ctx context.Context, client *http.Client, url, token string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(b))
	}
	return string(b), nil
}
