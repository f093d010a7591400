package workqueue

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	cgwq "k8s.io/client-go/util/workqueue"
)

// detLimiter gives every (item, failure count) its own delay, with a per-item microsecond
// offset so that two different items never become due at the same instant (client-go's
// heap does not order ties).
type detLimiter struct {
	mu    sync.Mutex
	fails map[string]int
}

func (l *detLimiter) When(item string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.fails[item]
	l.fails[item] = n + 1
	return time.Duration(1<<min(n, 4))*time.Millisecond + itemOffset(item)
}

func (l *detLimiter) Forget(item string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.fails, item)
}

func (l *detLimiter) NumRequeues(item string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fails[item]
}

const diffItems = 8

var diffNames = func() []string {
	names := make([]string, diffItems)
	for i := range names {
		names[i] = fmt.Sprint("item-", i)
	}
	return names
}()

func itemOffset(item string) time.Duration {
	return time.Duration(item[len(item)-1]-'0'+1) * time.Microsecond
}

// runDifferential applies the operations encoded in ops (two bytes each) to a Queue and
// to client-go's rate-limiting queue, inside a synctest bubble, and requires the same items
// in the same order, the same lengths and the same requeue counts, checking this package's
// invariants after every operation. It uses only behaviour both share: Done only for items
// handed out, Get only when an item is ready, no rate-limited add after shut-down.
func runDifferential(t *testing.T, ops []byte) {
	synctest.Test(t, func(t *testing.T) {
		ours := New(Config[string]{RateLimiter: &detLimiter{fails: map[string]int{}}})
		theirs := cgwq.NewTypedRateLimitingQueue[string](&detLimiter{fails: map[string]int{}})
		defer theirs.ShutDown()
		defer ours.ShutDown()
		var held []string
		shut := false
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%8, int(ops[i+1])
			item := diffNames[arg%diffItems]
			desc := ""
			switch op {
			case 0:
				desc = "Add " + item
				ours.Add(item)
				theirs.Add(item)
			case 1:
				desc = "Get"
				if ours.Len() == 0 || theirs.Len() == 0 {
					desc = "Get skipped"
					break
				}
				a, err := ours.Get(t.Context())
				b, down := theirs.Get()
				if err != nil || down || a != b {
					t.Fatalf("op %d: Get = %q, %v; client-go %q, %v", i/2, a, err, b, down)
				}
				held = append(held, a)
			case 2:
				if len(held) == 0 {
					desc = "Done skipped"
					break
				}
				k := arg % len(held)
				desc = "Done " + held[k]
				ours.Done(held[k])
				theirs.Done(held[k])
				held = append(held[:k], held[k+1:]...)
			case 3:
				d := time.Duration(arg/diffItems%6) * time.Millisecond
				if d > 0 {
					d += itemOffset(item)
				}
				desc = fmt.Sprint("AddAfter ", item, " ", d)
				ours.AddAfter(item, d)
				theirs.AddAfter(item, d)
			case 4:
				if shut {
					desc = "AddRateLimited skipped"
					break
				}
				desc = "AddRateLimited " + item
				ours.AddRateLimited(item)
				theirs.AddRateLimited(item)
			case 5:
				desc = "Forget " + item
				ours.Forget(item)
				theirs.Forget(item)
			case 6:
				d := time.Duration(arg%20) * time.Millisecond
				desc = fmt.Sprint("sleep ", d)
				time.Sleep(d)
			case 7:
				if arg%4 != 0 {
					desc = "ShutDown skipped"
					break
				}
				desc = "ShutDown"
				shut = true
				ours.ShutDown()
				theirs.ShutDown()
			}
			synctest.Wait() // let client-go's delaying goroutine take in what was sent
			if a, b := ours.Len(), theirs.Len(); a != b {
				t.Fatalf("op %d (%s): Len = %d, client-go %d", i/2, desc, a, b)
			}
			if a, b := ours.NumRequeues(item), theirs.NumRequeues(item); a != b {
				t.Fatalf("op %d (%s): NumRequeues(%s) = %d, client-go %d", i/2, desc, item, a, b)
			}
			if a, b := ours.ShuttingDown(), theirs.ShuttingDown(); a != b {
				t.Fatalf("op %d (%s): ShuttingDown = %v, client-go %v", i/2, desc, a, b)
			}
			checkInvariants(t, ours)
		}
	})
}

// FuzzDifferential compares this queue with client-go's on arbitrary operation sequences.
// `go test` runs the seed corpus below; `go test -fuzz FuzzDifferential` explores further.
func FuzzDifferential(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 0, 1, 1, 0, 0, 1, 2, 0, 1, 0, 2, 0})             // dedup, stingy
	f.Add([]byte{3, 17, 3, 9, 3, 40, 6, 3, 1, 0, 1, 0, 6, 10, 1, 0})          // delays in deadline order
	f.Add([]byte{4, 1, 4, 1, 6, 1, 1, 0, 4, 1, 2, 0, 6, 5, 1, 0, 5, 1, 4, 1}) // backoff, forget
	f.Add([]byte{0, 1, 0, 2, 1, 0, 0, 1, 7, 0, 0, 3, 1, 0, 2, 0, 1, 0, 2, 0}) // shut-down
	f.Add([]byte{3, 9, 0, 1, 1, 0, 6, 2, 2, 0, 1, 0, 2, 0, 3, 1, 6, 19, 1, 0})
	r := rand.New(rand.NewPCG(3, 4))
	for range 40 {
		ops := make([]byte, 2*(20+r.IntN(150)))
		for i := range ops {
			ops[i] = byte(r.Uint32())
		}
		f.Add(ops)
	}
	f.Fuzz(runDifferential)
}
