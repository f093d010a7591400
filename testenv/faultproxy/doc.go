// Package faultproxy puts a loopback HTTP proxy in front of a kube-apiserver so that a
// controller's own tests can see the faults a real cluster shows now and then: watch
// events that arrive late or all at once, watch connections that break, 410 Gone, 429
// Too Many Requests and 500 answers, and LISTs served from an older state.
//
// Start a Proxy with the upstream's *rest.Config and point clients at Proxy.Config: the
// proxy speaks plain HTTP on 127.0.0.1 without credentials and forwards every request
// with the upstream's transport and credentials. Faults are Rules chosen by resource
// ("pods", "podsets.example.com", or "" for every resource), set in Config.Rules and
// replaced while running with SetRules.
//
// Guarantees:
//   - A request no rule matches is forwarded unchanged, and so is its answer.
//   - Watch events (newline-delimited JSON, and length-prefixed protobuf frames) keep
//     their order: a delayed or held event is never written before the one before it,
//     and none is lost or duplicated unless the connection is dropped on purpose.
//   - Every random choice comes from Config.Seed (math/rand/v2 PCG): the delays of a
//     watch stream depend only on the seed, the resource and how many watches of that
//     resource the proxy has served before; whether a request gets an injected status
//     depends only on the seed, the resource and how many requests of that resource the
//     proxy has seen before. A run is reproducible when the requests of each resource
//     reach the proxy in the same order; concurrent clients of one resource, retries and
//     the timing of the server are outside the proxy's control.
//   - Close ends every stream the proxy holds and returns once none of its goroutines
//     runs.
//
// Not covered: protocol upgrades (exec, attach, port-forward), watch encodings other
// than JSON and protobuf (they are forwarded without event faults), and HTTP/2 from
// the clients (the proxy serves HTTP/1.1).
package faultproxy
