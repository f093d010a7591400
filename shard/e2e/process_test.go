//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/shard"
	"github.com/ctrlkit/ctrlkit/testenv"
)

// Kinds of membership change.
const (
	changeJoin  = "join"  // a new replica process starts
	changeLeave = "leave" // SIGTERM: the member revokes everything and deletes its Lease
	changeKill  = "kill"  // SIGKILL: the slots are free once its Lease has expired
	changeCut   = "cut"   // SIGUSR1: cut off from the API server, it drops its slots itself
)

// procLedger is the test's record, outside the replica processes, of who
// reconciles which key and who holds which slot, from the replicas' events
// (see runReplica) and the kills the test makes. Goroutine-safe.
type procLedger struct {
	mu         sync.Mutex
	slotOf     map[string]int             // key → its slot, from the UID the server gave it
	active     map[string]map[string]bool // key → replicas reconciling it
	holders    [slots]map[string]bool     // slot → replicas that may work on it
	since      [slots]time.Time           // slot → when it lost its last holder; zero while held
	sinceCause [slots]string              // the change that made it ownerless
	sinceKind  [slots]string              // the kind of change that made it ownerless
	killedAt   [slots]time.Time           // slot → when its holder was killed, until granted again
	dying      map[string]bool            // replicas killed: their events are no longer heeded
	members    map[string]string          // replica → the members it last saw, sorted, joined by ","
	lastMove   time.Time                  // of the last grant or revoke

	measuring      bool   // ownerless times are measured (from the first settled split on)
	change         string // the change in progress, for sinceCause
	changeKind     string
	worstOwnerless time.Duration
	worstCause     string
	worstByKind    map[string]time.Duration // longest ownerless time by kind of change
	takeovers      []time.Duration          // from a kill to the grant of a slot the killed replica held
	overlaps       []string                 // a key reconciled by two replicas at once
	outside        []string                 // a reconcile of a key whose slot the replica did not hold
	doubles        []*double                // a slot granted to a replica while another held it
	reconciles     map[string]int
}

func newProcLedger() *procLedger {
	l := &procLedger{slotOf: map[string]int{}, active: map[string]map[string]bool{}, dying: map[string]bool{}, members: map[string]string{}, reconciles: map[string]int{}, worstByKind: map[string]time.Duration{}, change: "the start"}
	now := time.Now()
	for s := range slots {
		l.holders[s], l.since[s] = map[string]bool{}, now
	}
	return l
}

// record applies one event of replica id and reports whether to acknowledge
// it: not an event that needs none, nor one of a replica being killed (it
// does nothing more).
func (l *procLedger) record(id, kind, arg string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dying[id] {
		return false
	}
	now := time.Now()
	switch kind {
	case eventEnter:
		l.reconciles[id]++
		for other := range l.active[arg] {
			l.overlaps = append(l.overlaps, fmt.Sprintf("%s by %s and %s", arg, other, id))
		}
		if l.active[arg] == nil {
			l.active[arg] = map[string]bool{}
		}
		l.active[arg][id] = true
		if s, ok := l.slotOf[arg]; !ok || !l.holders[s][id] {
			l.outside = append(l.outside, fmt.Sprintf("%s (slot %d) by %s", arg, s, id))
		}
	case eventLeave:
		delete(l.active[arg], id)
		if len(l.active[arg]) == 0 {
			delete(l.active, arg)
		}
	case eventGrant:
		hold := parseSlots(arg)
		for s := range slots {
			switch {
			case hold[s] && !l.holders[s][id]:
				for other := range l.holders[s] {
					l.doubles = append(l.doubles, &double{slot: s, to: id, from: other, at: now, during: l.change})
				}
				l.holders[s][id] = true
				if l.measuring && !l.since[s].IsZero() {
					d := now.Sub(l.since[s])
					if d > l.worstOwnerless {
						l.worstOwnerless, l.worstCause = d, fmt.Sprintf("slot %d after %s", s, l.sinceCause[s])
					}
					l.worstByKind[l.sinceKind[s]] = max(l.worstByKind[l.sinceKind[s]], d)
				}
				if !l.killedAt[s].IsZero() {
					l.takeovers = append(l.takeovers, now.Sub(l.killedAt[s]))
				}
				l.since[s], l.killedAt[s] = time.Time{}, time.Time{}
			case !hold[s] && l.holders[s][id]: // a grant lists all it holds
				l.releaseLocked(s, id, now)
			}
		}
		l.lastMove = now
	case eventRevoke:
		keep := parseSlots(arg)
		for s := range slots {
			if l.holders[s][id] && !keep[s] {
				l.releaseLocked(s, id, now)
			}
		}
		l.lastMove = now
	case eventMembers:
		l.members[id] = arg
		return false
	default:
		l.overlaps = append(l.overlaps, fmt.Sprintf("unknown event %q %q from %s", kind, arg, id))
	}
	return true
}

// double is a slot granted to a replica while another held it.
type double struct {
	slot     int
	to, from string
	at       time.Time
	during   string
	until    time.Time // when from gave it up; zero while it has not
}

func (d *double) String() string {
	held := "and still holds it"
	if !d.until.IsZero() {
		held = fmt.Sprintf("and gave it up %v later", d.until.Sub(d.at).Round(time.Millisecond))
	}
	return fmt.Sprintf("slot %d granted to %s at %s during %s while %s held it, %s", d.slot, d.to, d.at.Format("15:04:05.000"), d.during, d.from, held)
}

// fenced returns an error that lists the breaches of fencing recorded so far,
// nil if there were none.
func (l *procLedger) fenced() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.overlaps) == 0 && len(l.outside) == 0 && len(l.doubles) == 0 {
		return nil
	}
	return fmt.Errorf("keys reconciled by two replicas at once: %v; keys reconciled outside their replica's slots: %v; slots held by two replicas: %v", l.overlaps, l.outside, l.doubles)
}

// releaseLocked takes slot s from replica id at time at. It requires l.mu held.
func (l *procLedger) releaseLocked(s int, id string, at time.Time) {
	for _, d := range l.doubles {
		if d.slot == s && d.from == id && d.until.IsZero() {
			d.until = at
		}
	}
	delete(l.holders[s], id)
	if len(l.holders[s]) == 0 {
		l.since[s], l.sinceCause[s], l.sinceKind[s] = at, l.change, l.changeKind
	}
}

// killing marks replica id as being killed and returns the time: its slots
// are ownerless from then on. Its reconciles in flight stay active until
// buried: it may still run until the kernel has taken it away.
func (l *procLedger) killing(id string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dying[id] = true
	return time.Now()
}

// bury forgets replica id, whose process has exited: its reconciles in flight
// ended and its slots were free from at (killed: when it was killed). It
// returns what it had left: keys in flight and slots held (none after a clean
// leave).
func (l *procLedger) bury(id string, at time.Time, killed bool) (keys, held int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, ids := range l.active {
		if ids[id] {
			keys++
			delete(ids, id)
			if len(ids) == 0 {
				delete(l.active, k)
			}
		}
	}
	for s := range slots {
		if l.holders[s][id] {
			held++
			l.releaseLocked(s, id, at)
			if killed {
				l.killedAt[s] = at
			}
		}
	}
	l.lastMove = time.Now()
	delete(l.members, id)
	l.dying[id] = true
	return keys, held
}

// held returns how many slots replica id holds.
func (l *procLedger) held(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for s := range slots {
		if l.holders[s][id] {
			n++
		}
	}
	return n
}

// settled reports whether the split is at rest: every slot has one holder
// among live, every live replica sees exactly live as the members, and no
// slot has moved for quiet. Otherwise it says what is missing.
func (l *procLedger) settled(live []string, quiet time.Duration) (bool, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var unowned []string
	for s := range slots {
		if len(l.holders[s]) != 1 {
			unowned = append(unowned, fmt.Sprintf("%d: %v", s, slices.Sorted(maps.Keys(l.holders[s]))))
		}
	}
	if len(unowned) > 0 {
		return false, fmt.Sprintf("%d slots without exactly one holder (slot: holders) %v; members seen: %v", len(unowned), unowned, l.members)
	}
	want := slices.Clone(live)
	slices.Sort(want)
	for _, id := range live {
		if got := l.members[id]; got != strings.Join(want, ",") {
			return false, fmt.Sprintf("%s sees members %q, want %q", id, got, strings.Join(want, ","))
		}
	}
	if d := time.Since(l.lastMove); d < quiet {
		return false, fmt.Sprintf("a slot moved %v ago", d)
	}
	return true, ""
}

// replicaProcess is one replica running in a process of its own.
type replicaProcess struct {
	id     string
	cmd    *exec.Cmd
	acks   *os.File      // the test's end: acknowledgements
	read   chan struct{} // closed when the replica's events end
	logPth string
}

// startReplicaProcess runs the test binary again as replica id (see init and
// runReplica) and follows its events into l.
func startReplicaProcess(t *testing.T, dir, ns, kubeconfig, id string, l *procLedger) *replicaProcess {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	eventsR, eventsW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	acksR, acksW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r := &replicaProcess{id: id, acks: acksW, read: make(chan struct{}), logPth: filepath.Join(dir, id+".log")}
	logFile, err := os.Create(r.logPth)
	if err != nil {
		t.Fatal(err)
	}
	r.cmd = exec.Command(exe)
	r.cmd.Env = append(os.Environ(), replicaEnv+"="+id, namespaceEnv+"="+ns, kubeconfigEnv+"="+kubeconfig)
	r.cmd.Stdout, r.cmd.Stderr = logFile, logFile
	r.cmd.ExtraFiles = []*os.File{eventsW, acksR} // descriptors 3 and 4
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = r.cmd.Start()
	eventsW.Close()
	acksR.Close()
	logFile.Close()
	if err != nil {
		eventsR.Close()
		acksW.Close()
		t.Fatal(err)
	}
	go func() {
		defer close(r.read)
		defer eventsR.Close()
		sc := bufio.NewScanner(eventsR)
		for sc.Scan() {
			kind, rest, _ := strings.Cut(sc.Text(), " ")
			seq, arg, _ := strings.Cut(rest, " ")
			if l.record(id, kind, arg) {
				_, _ = fmt.Fprintln(r.acks, seq) // fails only once the replica is gone
			}
		}
	}()
	return r
}

// kill SIGKILLs the replica and waits until it is gone.
func (r *replicaProcess) kill(l *procLedger) {
	at := l.killing(r.id)
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	<-r.read
	r.acks.Close()
	l.bury(r.id, at, true)
}

// stop SIGTERMs the replica and waits until it has left and exited: it must
// exit with 0, holding nothing and reconciling nothing.
func (r *replicaProcess) stop(l *procLedger) error {
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan error, 1)
	go func() { exited <- r.cmd.Wait() }()
	var err error
	select {
	case err = <-exited:
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		err = errors.Join(errors.New("did not exit within 30s of SIGTERM"), <-exited)
	}
	<-r.read
	r.acks.Close()
	if keys, held := l.bury(r.id, time.Now(), false); keys > 0 || held > 0 {
		err = errors.Join(err, fmt.Errorf("exited with %d keys in flight and %d slots held", keys, held))
	}
	if err != nil {
		return fmt.Errorf("replica %s: %w\n%s", r.id, err, r.logTail())
	}
	return nil
}

// logTail is the end of the replica's output.
func (r *replicaProcess) logTail() string {
	b, _ := os.ReadFile(r.logPth)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// envInt is the integer in environment variable name, or def.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// TestShardedControllerProcesses: replicas of the controller of
// TestShardedController, each in a process of its own, split 10,000
// ConfigMaps (CTRLKIT_SHARD_KEYS) while writers keep changing them, through 20
// membership changes (CTRLKIT_SHARD_CHANGES) in a seeded order: replicas
// join, leave (SIGTERM), are killed (SIGKILL) and are cut off from the API
// server. The replicas report every reconcile's start and end and every grant
// and revoke to the test, which acknowledges each before the replica goes on:
// its ledger shows no key reconciled by two replicas at once, no reconcile of
// a key outside the slots its replica held, no slot granted while another
// replica held it, and no slot without a holder for longer than the lease
// duration + 2 renewal rounds + 2 s. At the end every ConfigMap is reconciled at
// its last change.
//
// The package's kube-apiserver runs without the ShardedListAndWatch gate, so
// every replica's informer filters its shard itself (the fallback).
func TestShardedControllerProcesses(t *testing.T) {
	shardedProcesses(t, env, envInt(t, "CTRLKIT_SHARD_KEYS", 10000), envInt(t, "CTRLKIT_SHARD_CHANGES", 20))
}

// TestShardedControllerProcessesServerFiltered is TestShardedControllerProcesses
// on a control plane of its own whose kube-apiserver has the ShardedListAndWatch
// gate: the replicas' lists and watches are filtered by the server (KEP-5866),
// and a hand-off re-scopes them there. 2,000 ConfigMaps
// (CTRLKIT_SHARD_SERVER_KEYS) and 10 changes (CTRLKIT_SHARD_SERVER_CHANGES).
func TestShardedControllerProcessesServerFiltered(t *testing.T) {
	gated, err := testenv.Start(t.Context(), testenv.Config{APIServerFlags: []string{"--feature-gates=ShardedListAndWatch=true"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := gated.Stop(); err != nil {
			t.Error(err)
		}
	})
	shardedProcesses(t, gated, envInt(t, "CTRLKIT_SHARD_SERVER_KEYS", 2000), envInt(t, "CTRLKIT_SHARD_SERVER_CHANGES", 10))
}

func shardedProcesses(t *testing.T, env *testenv.Env, objects, changes int) {
	const (
		settleQuiet   = 4 * renewPeriod // no slot moved for this long: the split is at rest
		settleTimeout = 30 * time.Second
		// A killed replica's Lease runs out at most a lease duration after the kill;
		// a member notices on its next round and holds the slot after one more; the
		// 2 s beyond are API and scheduling latency with a dozen race-built replica
		// processes, the API server and etcd on 2 cores (a CI run, with another e2e
		// package beside it, measured 5.1 s).
		ownerlessMax = leaseDuration + 2*renewPeriod + 2*time.Second
	)
	began := time.Now()
	ctx := t.Context()
	ns := env.Namespace(t)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig, "admin"); err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(env.Config())
	cms := kube.CoreV1().ConfigMaps(ns)
	l := newProcLedger()

	// The ConfigMaps, by 16 writers at once; the ledger learns each one's slot.
	var creating sync.WaitGroup
	createErrs := make(chan error, 16)
	for w := range 16 {
		creating.Go(func() {
			for i := w; i < objects; i += 16 {
				cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-" + strconv.Itoa(i)}, Data: map[string]string{"gen": "0"}}, metav1.CreateOptions{})
				if err != nil {
					createErrs <- err
					return
				}
				l.mu.Lock()
				l.slotOf[cm.Name] = shard.SlotOf(reflector.Hash(string(cm.UID)), slots)
				l.mu.Unlock()
			}
		})
	}
	creating.Wait()
	close(createErrs)
	if err := <-createErrs; err != nil {
		t.Fatal(err)
	}
	t.Logf("created %d ConfigMaps in %v", objects, time.Since(began).Round(time.Millisecond))

	var live, all []*replicaProcess
	next := 0
	liveIDs := func() []string {
		ids := make([]string, len(live))
		for i, r := range live {
			ids[i] = r.id
		}
		return ids
	}
	join := func() {
		next++
		r := startReplicaProcess(t, dir, ns, kubeconfig, fmt.Sprintf("p-%d", next), l)
		live, all = append(live, r), append(all, r)
	}
	remove := func(i int) *replicaProcess {
		r := live[i]
		live = append(live[:i:i], live[i+1:]...)
		return r
	}
	defer func() { // last: what the replicas wrote, if the test failed
		if t.Failed() {
			for _, r := range all {
				t.Logf("replica %s wrote:\n%s", r.id, r.logTail())
			}
		}
	}()
	defer func() {
		for _, r := range live {
			if err := r.stop(l); err != nil {
				t.Error(err)
			}
		}
	}()
	settle := func(what string) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			ok, why := l.settled(liveIDs(), settleQuiet)
			if ok {
				return time.Since(start)
			}
			if time.Since(start) > settleTimeout {
				t.Fatalf("%s: not settled after %v: %s", what, settleTimeout, why)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	join()
	join()
	settle("start")
	if err := l.fenced(); err != nil {
		t.Fatalf("start: %v", err)
	}
	l.mu.Lock()
	l.measuring = true
	l.mu.Unlock()

	// The writers: two bump gen of random ConfigMaps until the end.
	wctx, stopWriters := context.WithCancel(ctx)
	var writers sync.WaitGroup
	var writes atomic.Int64
	for w := range 2 {
		writers.Go(func() {
			wr := rand.New(rand.NewPCG(9, uint64(w)))
			for wctx.Err() == nil {
				name := "cm-" + strconv.Itoa(wr.IntN(objects))
				cm, err := cms.Get(wctx, name, metav1.GetOptions{})
				if err != nil {
					continue
				}
				n, _ := strconv.Atoi(cm.Data["gen"])
				cm.Data["gen"] = strconv.Itoa(n + 1)
				if _, err := cms.Update(wctx, cm, metav1.UpdateOptions{}); err == nil {
					writes.Add(1)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	defer func() { stopWriters(); writers.Wait() }()

	// The changes, in a seeded order between 1 and 5 live replicas: half
	// joins, the other half kills, cuts and leaves in turn.
	rnd := rand.New(rand.NewPCG(17, 17))
	var plan []string
	for i := range changes {
		kind := changeJoin
		if i%2 == 1 {
			kind = []string{changeKill, changeCut, changeLeave}[i/2%3]
		}
		plan = append(plan, kind)
	}
	rnd.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	kinds := map[string]int{}
	var worstSettle time.Duration
	for change := range changes {
		// The first planned change the replica count allows.
		kind := changeJoin
		if i := slices.IndexFunc(plan, func(k string) bool {
			return (k == changeJoin && len(live) < 5) || (k != changeJoin && len(live) > 1)
		}); i >= 0 {
			kind = plan[i]
			plan = append(plan[:i:i], plan[i+1:]...)
		} else if len(live) > 1 {
			kind = changeLeave // only joins left, and 5 replicas
		}
		kinds[kind]++
		what := fmt.Sprintf("change %d (%s)", change, kind)
		l.mu.Lock()
		l.change, l.changeKind = what, kind
		l.mu.Unlock()
		switch kind {
		case changeJoin:
			join()
		case changeLeave:
			if err := remove(rnd.IntN(len(live))).stop(l); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case changeKill:
			remove(rnd.IntN(len(live))).kill(l)
		case changeCut:
			r := remove(rnd.IntN(len(live)))
			if err := r.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			// It gives its slots up on its own before its Lease expires.
			deadline := time.Now().Add(leaseDuration)
			for l.held(r.id) > 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%s: %s still holds %d slots %v after the cut", what, r.id, l.held(r.id), leaseDuration)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err := r.stop(l); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		worstSettle = max(worstSettle, settle(what))
		if err := l.fenced(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	stopWriters()
	writers.Wait()
	l.mu.Lock()
	l.measuring = false
	l.mu.Unlock()

	// Every ConfigMap reconciled at its last change.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		list, err := cms.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		behind := 0
		for _, cm := range list.Items {
			if cm.Data["seen"] != cm.Data["gen"] {
				behind++
			}
		}
		if len(list.Items) == objects && behind == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d ConfigMaps not reconciled at their last change", behind, len(list.Items))
		}
		time.Sleep(500 * time.Millisecond)
	}

	if err := l.fenced(); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.worstOwnerless > ownerlessMax {
		t.Fatalf("a slot was without a holder for %v (%s), more than the lease duration + 2 renewal rounds + 2 s (%v)", l.worstOwnerless.Round(time.Millisecond), l.worstCause, ownerlessMax)
	}
	total := 0
	for _, n := range l.reconciles {
		total += n
	}
	slices.Sort(l.takeovers)
	takeover := "none"
	if n := len(l.takeovers); n > 0 {
		takeover = fmt.Sprintf("%v to %v", l.takeovers[0].Round(time.Millisecond), l.takeovers[n-1].Round(time.Millisecond))
	}
	byKind := map[string]string{}
	for k, d := range l.worstByKind {
		byKind[k] = d.Round(time.Millisecond).String()
	}
	t.Logf("%d membership changes %v over %d ConfigMaps under %d writes: %d reconciles by %d replica processes %v; 0 keys reconciled by two replicas at once, 0 outside their replica's slots, 0 slots held twice; longest a slot went without a holder %v (%s; by kind of change %v; bound %v); a killed replica's slots taken over %v after the kill; longest settle %v; %v in all",
		changes, kinds, objects, writes.Load(), total, len(l.reconciles), l.reconciles, l.worstOwnerless.Round(time.Millisecond), l.worstCause, byKind, ownerlessMax, takeover, worstSettle.Round(time.Millisecond), time.Since(began).Round(time.Second))
}
