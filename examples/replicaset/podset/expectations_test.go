package podset

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leakcheck.Options()...) }

// expectState checks what Satisfied and Pending report for key.
func expectState(t *testing.T, x *Expectations[string], key string, wantOK bool, wantCreations, wantDeletions int) {
	t.Helper()
	ok, wait := x.Satisfied(key)
	c, d := x.Pending(key)
	if ok != wantOK || c != wantCreations || d != wantDeletions {
		t.Errorf("%s: Satisfied = %v (wait %v), Pending = %d creations, %d deletions; want %v, %d, %d",
			key, ok, wait, c, d, wantOK, wantCreations, wantDeletions)
	}
	if ok != (wait == 0) {
		t.Errorf("%s: Satisfied = %v with wait %v", key, ok, wait)
	}
}

func TestExpectationsCreations(t *testing.T) {
	var x Expectations[string]
	expectState(t, &x, "a", true, 0, 0) // nothing recorded
	x.ExpectCreations("a", 3)
	x.ExpectCreations("b", 1)
	expectState(t, &x, "a", false, 3, 0)
	x.CreationObserved("a")
	x.CreationFailed("a")
	expectState(t, &x, "a", false, 1, 0)
	x.CreationObserved("a")
	expectState(t, &x, "a", true, 0, 0)
	x.CreationObserved("a") // someone else's Pod: no negative balance
	x.ExpectCreations("a", 1)
	expectState(t, &x, "a", false, 1, 0)
	expectState(t, &x, "b", false, 1, 0) // keys are independent
	x.ExpectCreations("c", 0)
	expectState(t, &x, "c", true, 0, 0)
}

func TestExpectationsDeletions(t *testing.T) {
	var x Expectations[string]
	x.ExpectDeletions("a", []string{"u1", "u2"})
	x.ExpectCreations("a", 1)
	expectState(t, &x, "a", false, 1, 2)
	x.DeletionObserved("a", "u1")
	x.DeletionObserved("a", "u1") // marked for deletion, then gone: counted once
	x.DeletionObserved("a", "u9") // not expected
	x.DeletionObserved("b", "u2") // another owner
	expectState(t, &x, "a", false, 1, 1)
	x.DeletionObserved("a", "u2")
	expectState(t, &x, "a", false, 1, 0)
	x.CreationObserved("a")
	expectState(t, &x, "a", true, 0, 0)
	x.ExpectDeletions("a", nil)
	expectState(t, &x, "a", true, 0, 0)
}

func TestExpectationsForget(t *testing.T) {
	var x Expectations[string]
	x.ExpectCreations("a", 2)
	x.ExpectDeletions("a", []string{"u"})
	x.Forget("a")
	expectState(t, &x, "a", true, 0, 0)
	x.CreationObserved("a") // late events of a forgotten owner are ignored
	x.DeletionObserved("a", "u")
	expectState(t, &x, "a", true, 0, 0)
}

// TestExpectationsTimeout: unmet expectations stop blocking after the timeout,
// counted from the last time some were recorded, and are then dropped.
func TestExpectationsTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		x := Expectations[string]{Timeout: time.Minute}
		x.ExpectCreations("a", 1)
		if ok, wait := x.Satisfied("a"); ok || wait != time.Minute {
			t.Fatalf("Satisfied = %v, %v; want false, 1m", ok, wait)
		}
		time.Sleep(40 * time.Second)
		x.ExpectDeletions("a", []string{"u"}) // restarts the timeout
		time.Sleep(59 * time.Second)
		if ok, wait := x.Satisfied("a"); ok || wait != time.Second {
			t.Fatalf("after 99s: Satisfied = %v, %v; want false, 1s", ok, wait)
		}
		time.Sleep(time.Second)
		expectState(t, &x, "a", true, 0, 0) // timed out and dropped
		x.CreationObserved("a")             // a late event changes nothing
		expectState(t, &x, "a", true, 0, 0)
	})
}

func TestExpectationsDefaultTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var x Expectations[int]
		x.ExpectCreations(1, 1)
		time.Sleep(DefaultExpectationsTimeout - time.Nanosecond)
		if ok, _ := x.Satisfied(1); ok {
			t.Fatal("satisfied before the default timeout")
		}
		time.Sleep(time.Nanosecond)
		if ok, _ := x.Satisfied(1); !ok {
			t.Fatal("not satisfied after the default timeout")
		}
	})
}

// TestExpectationsConcurrent: observations racing with each other balance the
// expectations exactly (run under -race).
func TestExpectationsConcurrent(t *testing.T) {
	var x Expectations[string]
	const n = 200
	uids := make([]string, n)
	for i := range uids {
		uids[i] = string(rune('a'+i%26)) + string(rune('0'+i/26))
	}
	x.ExpectCreations("k", n)
	x.ExpectDeletions("k", uids)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { x.CreationObserved("k") })
		wg.Go(func() { x.DeletionObserved("k", uids[i]) })
		wg.Go(func() { x.Satisfied("k") })
	}
	wg.Wait()
	expectState(t, &x, "k", true, 0, 0)
}
