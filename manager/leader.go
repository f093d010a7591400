package manager

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/ctrlkit/ctrlkit/reconcile"
)

// lead campaigns for the lock of Config.LeaderElection and runs the controllers
// while it holds it, until ctx ends (lost false) or the lease is lost (lost
// true). startAll starts the controllers (and starts nothing once stopAll has
// been called); stopAll(cause) stops them and waits.
// The elector runs on a context of its own, ended only once the controllers
// have stopped, so that ReleaseOnCancel never frees the lock while a reconcile
// still runs. A term's controllers start once the caches have reached the floor
// (floor.go); a leader that stops while holding the lock publishes its own.
// fail stops Run with an error.
func (m *Manager) lead(ctx context.Context, startAll func(), stopAll func(cause error), fail func(error)) (lost bool, err error) {
	le := m.cfg.LeaderElection
	if le.Lock == nil {
		return false, fmt.Errorf("manager: LeaderElection.Lock is nil")
	}
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            le.Lock,
		LeaseDuration:   orDefault(le.LeaseDuration, reconcile.DefaultLeaseDuration),
		RenewDeadline:   orDefault(le.RenewDeadline, reconcile.DefaultRenewDeadline),
		RetryPeriod:     orDefault(le.RetryPeriod, reconcile.DefaultRetryPeriod),
		ReleaseOnCancel: le.ReleaseOnCancel,
		Name:            "manager",
		Callbacks: leaderelection.LeaderCallbacks{
			// The elector calls this in a goroutine of its own; starting is quick.
			OnStartedLeading: func(lctx context.Context) {
				m.log.Info("leader election won", "lock", le.Lock.Describe())
				if !m.cfg.UnsafeNoLeaderFloor {
					if err := m.catchUp(lctx); err != nil {
						if lctx.Err() == nil {
							fail(err)
						}
						return
					}
				}
				startAll()
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return false, fmt.Errorf("manager: leader election: %w", err)
	}
	electCtx, stopElect := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElect()
	electCtx = logr.NewContext(electCtx, m.log.WithName("leaderelection"))
	electDone := make(chan struct{})
	go func() {
		defer close(electDone)
		elector.Run(electCtx)
	}()
	select {
	case <-ctx.Done():
	case <-electDone: // the elector returns on its own only when the lease is lost
		lost = true
	}
	if lost {
		m.log.Info("leader election lost; stopping the controllers")
		stopAll(reconcile.ErrLeadershipLost)
	} else {
		stopAll(context.Canceled)
		m.publishFloor(electCtx) // if a term started: the lock is still held

	}
	stopElect()
	<-electDone
	return lost, nil
}

func orDefault[D comparable](d, def D) D {
	var zero D
	if d == zero {
		return def
	}
	return d
}
