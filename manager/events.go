package manager

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// EventRecorder returns the events.k8s.io recorder of one controller (its
// reportingController is name). It may be called before Run; events recorded
// while Run is not running are dropped (and logged at verbosity 1), those
// recorded while it runs are sent by client-go's tools/events broadcaster,
// which Run starts and, when it returns, stops.
func (m *Manager) EventRecorder(name string) events.EventRecorder {
	return &recorder{m: m, name: name}
}

type recorder struct {
	m    *Manager
	name string
}

// Eventf implements events.EventRecorder.
func (r *recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	m := r.m
	m.mu.Lock()
	rec := m.recorders[r.name]
	if rec == nil && m.broadcaster != nil {
		rec = m.broadcaster.NewRecorder(m.scheme, r.name)
		m.recorders[r.name] = rec
	}
	m.mu.Unlock()
	if rec == nil {
		m.log.V(1).Info("event dropped: the manager is not running", "controller", r.name, "reason", reason)
		return
	}
	rec.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

// startEvents starts the event broadcaster; the function it returns stops it.
// It keeps sending after ctx ends, until stop, so that the events of reconciles
// that drain after the end reach the server.
func (m *Manager) startEvents(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: m.kube.EventsV1()})
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		// Only a second start fails; this broadcaster is new.
		m.log.Error(err, "event broadcaster did not start")
	}
	m.mu.Lock()
	m.broadcaster = b
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		m.broadcaster = nil
		clear(m.recorders)
		m.mu.Unlock()
		b.Shutdown()
		cancel()
	}
}
