// Package docscheck holds no code; its test keeps the Go code shown in README.md identical to
// the runnable Example functions it is taken from, so that every snippet in the README
// compiles and is tested. Run `go test ./internal/docscheck -update` to rewrite the README's
// snippets from the examples.
package docscheck
