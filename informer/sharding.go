package informer

import (
	"context"

	"github.com/ctrlkit/ctrlkit/reflector"
)

// SetShard re-scopes the informer to shard s (the zero Shard: the whole
// collection); see reflector.Reflector.SetShard. Objects that leave the shard
// reach the handlers as deletions whose final state is unknown
// (Deleted.FinalStateUnknown): a controller must not take them for deletions
// of the objects, for instance by checking that it still owns the key.
func (inf *Informer[T]) SetShard(s reflector.Shard) error { return inf.refl.SetShard(s) }

// Shard returns the informer's shard: its Config.Reflector.Shard or the last
// SetShard.
func (inf *Informer[T]) Shard() reflector.Shard { return inf.refl.Shard() }

// WaitForShard waits until the cache holds every object of shard s: a list
// that covered s (reflector.Shard.Covers) has been applied, and the watch after
// it keeps the cache complete until the shard changes again. Call it after
// SetShard widened the shard, before acting on the keys of the new ranges: until
// then, an object of those ranges missing from the cache may exist. It returns
// ctx.Err() if ctx ends first and ErrStopped if Run returns first.
func (inf *Informer[T]) WaitForShard(ctx context.Context, s reflector.Shard) error {
	for {
		inf.rvMu.Lock()
		ok := inf.listedSet && inf.listed.Covers(s) && inf.appliedUnits >= inf.listedAt
		if !ok && inf.rvWake == nil {
			inf.rvWake = make(chan struct{})
		}
		wake := inf.rvWake
		inf.rvMu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		case <-inf.stoppedCh:
			return ErrStopped
		}
	}
}
