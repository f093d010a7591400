//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/netcut"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/shard"
)

// The environment of a replica process: the test binary run again by
// TestShardedControllerProcesses, which init turns into one replica of the
// controller before any test (or TestMain's control plane) starts.
const (
	replicaEnv    = "CTRLKIT_SHARD_REPLICA" // the replica's identity; set only in a replica process
	namespaceEnv  = "CTRLKIT_SHARD_NAMESPACE"
	kubeconfigEnv = "CTRLKIT_SHARD_KUBECONFIG"
)

// A replica process talks to the test over two pipes: it writes events, one
// a line, on file descriptor 3 and reads acknowledgements on 4.
//
//	E seq key     a reconcile of key starts; it waits for the ack
//	L seq key     that reconcile has ended; it returns after the ack
//	G seq slots   Grant: the member holds slots ("-" for none); keys are let in after the ack
//	R seq slots   Revoke: the controller has stopped every key outside slots; Revoke returns after the ack
//	S 0 members   the members the member saw in its last round (no ack)
//
// The test answers "seq" to each event that waits. It records an event before
// it answers, so what it records of a reconcile spans the reconcile itself,
// and of a hold, the time the replica may work on the slots.
const (
	eventEnter   = "E"
	eventLeave   = "L"
	eventGrant   = "G"
	eventRevoke  = "R"
	eventMembers = "S"
)

func init() {
	if id := os.Getenv(replicaEnv); id != "" {
		os.Exit(runReplica(id, os.Getenv(namespaceEnv), os.Getenv(kubeconfigEnv)))
	}
}

// parentLink is a replica process's line to the test. It is goroutine-safe.
type parentLink struct {
	out *os.File

	mu      sync.Mutex // guards seq and waiting, and orders writes to out
	seq     uint64
	waiting map[uint64]chan struct{} // seq → closed when acknowledged
	gone    chan struct{}            // closed when the test's end of the acks closes
}

// call sends an event and waits for the test to acknowledge it. A replica
// whose test is gone exits.
func (p *parentLink) call(kind, arg string) {
	p.mu.Lock()
	p.seq++
	seq, ack := p.seq, make(chan struct{})
	p.waiting[seq] = ack
	_, err := fmt.Fprintf(p.out, "%s %d %s\n", kind, seq, arg)
	p.mu.Unlock()
	if err != nil {
		os.Exit(3)
	}
	select {
	case <-ack:
	case <-p.gone:
		os.Exit(3)
	}
}

// tell sends an event that needs no acknowledgement.
func (p *parentLink) tell(kind, arg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := fmt.Fprintf(p.out, "%s 0 %s\n", kind, arg); err != nil {
		os.Exit(3)
	}
}

// readAcks wakes the callers the test has acknowledged, until the test closes
// its end.
func (p *parentLink) readAcks(in io.Reader) {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		seq, _ := strconv.ParseUint(sc.Text(), 10, 64)
		p.mu.Lock()
		ack := p.waiting[seq]
		delete(p.waiting, seq)
		p.mu.Unlock()
		if ack != nil {
			close(ack)
		}
	}
	close(p.gone)
}

// slotTable is a hash in each slot: slot s is in a shard iff the shard holds
// slotTable[s].
var slotTable = func() (t [slots]uint64) {
	for s := range slots {
		t[s] = start(s)
	}
	return t
}()

// formatShard lists the slots of a shard, "-" for none.
func formatShard(sh reflector.Shard) string {
	var parts []string
	for s := range slots {
		if sh.ContainsHash(slotTable[s]) {
			parts = append(parts, strconv.Itoa(s))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ",")
}

// parseSlots reads formatShard's list.
func parseSlots(v string) map[int]bool {
	out := map[int]bool{}
	for _, p := range strings.Split(v, ",") {
		if n, err := strconv.Atoi(p); err == nil {
			out[n] = true
		}
	}
	return out
}

// runReplica runs one replica of the controller of startReplica (an informer
// re-scoped to the member's slots, a controller of 4 workers restricted to
// them, a 5 ms reconcile that copies data "gen" to "seen"), reporting to the
// test through the link, until SIGTERM: then the member leaves (revokes
// everything and deletes its Lease) before the controller stops. SIGUSR1 cuts
// the replica off from the API server, for good. It returns the exit code.
func runReplica(id, ns, kubeconfig string) int {
	link := &parentLink{out: os.NewFile(3, "events"), waiting: map[uint64]chan struct{}{}, gone: make(chan struct{})}
	go link.readAcks(os.NewFile(4, "acks"))
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGUSR1)

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		return 2
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	cut := netcut.New()
	kube, err := kubernetes.NewForConfig(cut.Wrap(cfg))
	if err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		return 2
	}
	inf := informer.New(reflector.FromTyped(kube.CoreV1().ConfigMaps(ns)), informer.Config[*corev1.ConfigMap]{Name: id})
	ownsFor := func(sh reflector.Shard) func(types.NamespacedName) bool {
		return func(k types.NamespacedName) bool {
			obj, err := inf.Lister().Get(k.Namespace, k.Name)
			return err == nil && sh.Contains(obj.Namespace, string(obj.UID))
		}
	}
	ctl := reconcile.New(reconcile.Func[types.NamespacedName](func(ctx context.Context, k types.NamespacedName) (reconcile.Result, error) {
		link.call(eventEnter, k.Name)
		defer link.call(eventLeave, k.Name)
		time.Sleep(5 * time.Millisecond) // the work
		cm, err := inf.Lister().Get(k.Namespace, k.Name)
		if err != nil || cm.Data["seen"] == cm.Data["gen"] {
			return reconcile.Result{}, nil
		}
		cp := cm.DeepCopy()
		cp.Data["seen"] = cm.Data["gen"]
		cp.Data["by"] = id
		_, err = kube.CoreV1().ConfigMaps(k.Namespace).Update(ctx, cp, metav1.UpdateOptions{})
		return reconcile.Result{}, err
	}), reconcile.Config[types.NamespacedName]{Name: id, Workers: 4, Restrictable: true})
	if err := ctl.Watch(reconcile.FromInformer(inf, reconcile.ByObject[*corev1.ConfigMap]())); err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		return 2
	}
	if err := ctl.Restrict(context.Background(), func(types.NamespacedName) bool { return false }); err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		return 2
	}
	m, err := shard.New(shard.Config{
		Client: kube, Namespace: ns, Group: "controller", Identity: id, Field: reflector.ShardByUID, Slots: slots,
		LeaseDuration: leaseDuration, RenewPeriod: renewPeriod, RenewDeadline: renewDeadline,
		Logger: funcr.New(func(prefix, args string) {
			fmt.Fprintln(os.Stderr, time.Now().Format("15:04:05.000"), id, prefix, args)
		}, funcr.Options{}),
		// As startReplica: keys first, then the cache. The test learns of a
		// revoke after the keys have stopped, and of a grant before any key
		// is let in.
		Revoke: func(ctx context.Context, keep reflector.Shard) error {
			if err := ctl.Restrict(ctx, ownsFor(keep)); err != nil {
				return err
			}
			link.call(eventRevoke, formatShard(keep))
			if len(keep.Ranges) > 0 {
				return inf.SetShard(keep)
			}
			return nil
		},
		Grant: func(hold reflector.Shard) {
			link.call(eventGrant, formatShard(hold))
			_ = ctl.Restrict(context.Background(), ownsFor(hold))
			_ = inf.SetShard(hold)
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		return 2
	}

	workCtx, stopWork := context.WithCancel(context.Background())
	memberCtx, leave := context.WithCancel(context.Background())
	var work sync.WaitGroup
	work.Go(func() { _ = inf.Run(workCtx) })
	work.Go(func() { _ = ctl.Run(workCtx) })
	memberDone := make(chan error, 1)
	go func() { memberDone <- m.Run(memberCtx) }()
	work.Go(func() { // the members it sees, when they change
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		last := ""
		for {
			select {
			case <-memberCtx.Done():
				return
			case <-tick.C:
			}
			if seen := strings.Join(m.Status().Members, ","); seen != last && seen != "" {
				link.tell(eventMembers, seen)
				last = seen
			}
		}
	})
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGUSR1 {
				cut.Cut()
				continue
			}
			leave()
			err := <-memberDone
			stopWork()
			work.Wait()
			if err != nil {
				fmt.Fprintln(os.Stderr, "replica: leave:", err) // expected after a cut
			}
			return 0
		case err := <-memberDone:
			fmt.Fprintln(os.Stderr, "replica: the member stopped on its own:", err)
			leave()
			stopWork()
			work.Wait()
			return 1
		}
	}
}
