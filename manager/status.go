package manager

import "github.com/ctrlkit/ctrlkit/reflector"

// InformerStatus is a snapshot of one shared informer, for probes and metrics.
type InformerStatus struct {
	// Name is the informer's name, such as "pods in default".
	Name string
	// Synced is the informer's HasSynced.
	Synced bool
	// Health is its reflector's health: state, last error (a Forbidden list is
	// a *reflector.AccessError there), counters.
	Health reflector.Health
	// Objects is how many objects its cache holds.
	Objects int
	// LastAppliedResourceVersion is the resourceVersion its cache reflects.
	LastAppliedResourceVersion string
	// Users counts the calls that returned it and were not released.
	Users int
}

// ControllerState is where a controller added with Add stands.
type ControllerState int

// The states of a controller.
const (
	// Waiting: not started yet (the informers are syncing, or this process is
	// not the leader).
	Waiting ControllerState = iota
	// Running: its Run is running.
	Running
	// Ended: its Run returned (see ControllerStatus.Err).
	Ended
)

func (s ControllerState) String() string {
	switch s {
	case Waiting:
		return "waiting"
	case Running:
		return "running"
	case Ended:
		return "ended"
	}
	return "unknown"
}

// ControllerStatus is a snapshot of one controller added with Add.
type ControllerStatus struct {
	Name  string
	State ControllerState
	// Synced is the controller's HasSynced, if it has one (reconcile.Controller
	// does: its sources synced), else whether it is Running.
	Synced bool
	// Err is what its Run returned, once Ended.
	Err error
}

// Informers returns a snapshot of the shared informers, in the order they were
// made.
func (m *Manager) Informers() []InformerStatus {
	m.mu.Lock()
	entries := make([]*informerEntry, len(m.order))
	copy(entries, m.order)
	refs := make([]int, len(entries))
	for i, e := range entries {
		refs[i] = e.refs
	}
	m.mu.Unlock()
	out := make([]InformerStatus, len(entries))
	for i, e := range entries {
		out[i] = InformerStatus{
			Name:                       e.inf.Name(),
			Synced:                     e.inf.HasSynced(),
			Health:                     e.inf.Health(),
			Objects:                    e.len(),
			LastAppliedResourceVersion: e.inf.LastAppliedResourceVersion(),
			Users:                      refs[i],
		}
	}
	return out
}

// Controllers returns a snapshot of the controllers added with Add, in the order
// they were added.
func (m *Manager) Controllers() []ControllerStatus {
	m.mu.Lock()
	entries := make([]*runnableEntry, len(m.runnables))
	copy(entries, m.runnables)
	m.mu.Unlock()
	out := make([]ControllerStatus, len(entries))
	for i, e := range entries {
		e.mu.Lock()
		st := ControllerStatus{Name: e.name, Err: e.err}
		switch {
		case e.running:
			st.State = Running
		case e.ended:
			st.State = Ended
		}
		e.mu.Unlock()
		st.Synced = st.State == Running
		if s, ok := e.r.(interface{ HasSynced() bool }); ok {
			st.Synced = s.HasSynced()
		}
		out[i] = st
	}
	return out
}
