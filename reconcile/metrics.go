package reconcile

import "time"

// Outcome classifies a finished reconcile, for Metrics.
type Outcome int

const (
	// Succeeded: nil error and no RequeueAfter.
	Succeeded Outcome = iota
	// RequeuedAfter: nil error and a positive Result.RequeueAfter.
	RequeuedAfter
	// Failed: an error that will be retried with backoff (a recovered panic included).
	Failed
	// FailedTerminal: an error made with Terminal; no retry.
	FailedTerminal
)

// String returns the result label controller-runtime uses: "success",
// "requeue_after", "error" (for Failed and FailedTerminal alike).
func (o Outcome) String() string {
	switch o {
	case Succeeded:
		return "success"
	case RequeuedAfter:
		return "requeue_after"
	case Failed, FailedTerminal:
		return "error"
	}
	return "unknown"
}

// Metrics receives a controller's reconcile events, so that any metrics system can
// be plugged in without a global registry; package prommetrics implements it with
// controller-runtime's metric names. Methods are called from the workers without any
// lock of the controller held, concurrently; implementations must be safe for
// concurrent use and return quickly.
type Metrics interface {
	// Workers is called once when Run starts its workers, with their number.
	Workers(n int)
	// ReconcileStarted is called just before Reconcile is called.
	ReconcileStarted()
	// ReconcileFinished is called after Reconcile returned (or panicked).
	ReconcileFinished(o Outcome, took time.Duration)
	// Panicked is called for every panic recovered from Reconcile, before
	// ReconcileFinished(Failed, ...).
	Panicked()
	// SourcePanicked is called for every panic recovered from a source's Mapper
	// or Predicate (see PanicError), from the source's goroutine.
	SourcePanicked()
}

type noMetrics struct{}

func (noMetrics) Workers(int)                              {}
func (noMetrics) ReconcileStarted()                        {}
func (noMetrics) ReconcileFinished(Outcome, time.Duration) {}
func (noMetrics) Panicked()                                {}
func (noMetrics) SourcePanicked()                          {}
