package informer_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

// TestWaitForShard: WaitForShard returns once a list covering the shard asked
// for is in the cache. Widened by SetShard, an informer holds the objects of
// the new ranges only after the relist: WaitForShard waits for it, and the
// cache then holds every object of the wider shard.
func TestWaitForShard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{WatchList: true}, 40)
		halves := reflector.SplitShards(reflector.ShardByName, 2)
		whole := reflector.SplitShards(reflector.ShardByName, 1)[0]
		inf := informer.New(srv, informer.Config[cm]{Reflector: reflector.Config[cm]{Shard: halves[0]}})
		waited := make(chan error, 1)
		go func() { waited <- inf.WaitForShard(t.Context(), halves[0]) }()
		synctest.Wait()
		select {
		case err := <-waited:
			t.Fatalf("WaitForShard returned %v before Run", err)
		default:
		}
		start(t, inf)
		if err := <-waited; err != nil {
			t.Fatal(err)
		}
		inHalf := len(inf.Indexer().List())
		if inHalf == 0 || inHalf == 40 {
			t.Fatalf("the half holds %d of 40: the test shows nothing", inHalf)
		}
		// Not yet the whole: a wait for it ends with its context.
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		err := inf.WaitForShard(ctx, whole)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitForShard(whole) of a half = %v, want the deadline", err)
		}
		// Widened: the wait ends with every object in the cache, not before.
		go func() { waited <- inf.WaitForShard(t.Context(), whole) }()
		if err := inf.SetShard(whole); err != nil {
			t.Fatal(err)
		}
		if err := <-waited; err != nil {
			t.Fatal(err)
		}
		if n := len(inf.Indexer().List()); n != 40 {
			t.Fatalf("WaitForShard(whole) returned with %d of 40 objects cached", n)
		}
	})
}
