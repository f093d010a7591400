// Package bench holds side-by-side benchmarks of ctrlkit against client-go. Every benchmark
// runs both implementations in one process on the same inputs, so their ratio is meaningful
// on a noisy machine. Run them with `make bench`.
package bench
