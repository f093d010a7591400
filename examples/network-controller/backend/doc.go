// Package backend is the external "network backend" the network-controller example
// reconciles against: a small HTTP service meant for loopback, standing in for
// something like OpenStack Neutron in the seed, with its own state on disk, and a Go
// client for it.
//
// # The service
//
// A Server holds networks, each named by a Kubernetes namespace and name and
// carrying a CIDR and a gateway. It serves, under /v1/networks:
//
//	GET    /v1/networks                    200, a JSON array of every Network, sorted by namespace and name
//	GET    /v1/networks/{namespace}/{name} 200 and the Network, or 404
//	PUT    /v1/networks/{namespace}/{name} body {"cidr": ..., "gateway": ...}:
//	                                       201 if created, 200 if it existed (its spec is replaced
//	                                       when it differs: PUT is create-or-update, never 409)
//	DELETE /v1/networks/{namespace}/{name} 204, or 404 if there was nothing to delete
//
// Errors are JSON objects {"error": "..."} with 400 (bad body or name), 404, 405, or 500
// (injected faults and failures to persist).
//
// The backend checks only that the fields are present and that names are valid path
// segments: validating CIDRs is the controller's job (the point of the example is that
// the controller rejects bad specs before they reach the backend).
//
// # Guarantees
//
//   - Durability: every change is written to dir/networks.json (a temporary file in the
//     same directory, synced, then renamed over the old one) before the request is
//     answered; New reloads that file, so a restarted Server has every change it
//     acknowledged. A failed write leaves the memory state unchanged and answers 500.
//   - A Server is safe for concurrent use; requests are serialised by one mutex.
//   - Fault injection for tests: FailNext(n) makes the next n requests fail with 500
//     without touching the state.
//
// A Server is an http.Handler: run it with Serve on a listener (it shuts down when
// the context ends), or hand it to net/http/httptest. A Client talks to it; its errors
// match ErrNotFound or are a *StatusError.
package backend
