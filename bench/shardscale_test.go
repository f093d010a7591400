//go:build e2e

package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/testenv"
)

// BenchmarkShardScale runs 1, 2 and 4 replicas of one sharded controller
// (manager.Config.Sharding, a ConfigMap informer of every namespace sharded
// ShardByObject, AddSharded, 16 workers, a reconcile that sleeps 5 ms) over
// the same shardObjects ConfigMaps of 1 KiB, spread evenly over
// shardNamespaces namespaces, each replica a process of its own (this test
// binary started again), against one control plane with kube-apiserver's
// ShardedListAndWatch gate on. Two modes, by Sharding.Field:
//
//   - "namespace": reflector.ShardByNamespace; the server filters each
//     replica's list and watch by namespace (KEP-5866). 64 namespaces over
//     64 slots do not split evenly among the replicas (a namespace is never
//     split, and the hashes of 64 names leave some slots empty, others with
//     two or three): share says by how much.
//   - "name": reflector.ShardByName (the manager's default); the server
//     cannot filter by name, so every replica receives everything and keeps
//     its shard of the keys.
//
// Per sub-benchmark, once the replicas have split the keys and reconciled
// each once:
//
//   - heap-B: the largest replica's live heap (HeapAlloc after a GC) minus
//     its own before its manager ran: what its cache and work hold;
//   - recv-B: the largest replica's response bytes from the API server since
//     it started (lists, watches, Leases), as its transport counted them;
//   - drain-ms: from asking every replica to reconcile all of its keys again
//     to the last one done: shardObjects / drain-ms is the aggregate
//     throughput;
//   - share: the largest replica's share of the keys (1/replicas at best).
//
// The rows of bench/RESULTS.md compare impl=r2 and impl=r4 against impl=r1.
// With -short it holds 4,000 objects.
//
//	CTRLKIT_CONTROLPLANE_BIN=... go test -tags e2e -run '^$' -bench BenchmarkShardScale -benchtime 1x -count 3 -timeout 30m ./bench/
func BenchmarkShardScale(b *testing.B) {
	for _, mode := range []struct{ name, field, filtering string }{
		{"namespace", reflector.ShardByNamespace, reflector.ShardFilteringServer},
		{"name", reflector.ShardByName, reflector.ShardFilteringClient},
	} {
		b.Run(mode.name, func(b *testing.B) {
			e := shardEnvFor(b)
			for _, n := range []int{1, 2, 4} {
				b.Run("impl=r"+strconv.Itoa(n), func(b *testing.B) {
					for range b.N {
						res, err := e.run(n, mode.field)
						if err != nil {
							b.Fatal(err)
						}
						b.ReportMetric(res.heap, "heap-B")
						b.ReportMetric(res.recv, "recv-B")
						b.ReportMetric(res.drain, "drain-ms")
						b.ReportMetric(res.share, "share")
						if n > 1 && res.filtering != mode.filtering {
							b.Fatalf("Field %s: filtering %q, want %q", mode.field, res.filtering, mode.filtering)
						}
					}
				})
			}
		})
	}
}

var shardObjects = 20000

const (
	// shardNamespace holds the replicas' Leases; the ConfigMaps are in
	// shardNamespaces namespaces (shardNamespaceOf), labelled shardLabel.
	shardNamespace  = "shard-scale"
	shardNamespaces = 64
	shardLabel      = "ctrlkit-bench=shard-scale"
	shardWorkers    = 16
	shardWork       = 5 * time.Millisecond
)

type shardEnv struct {
	env        *testenv.Env
	kubeconfig string
	objects    int
}

var (
	shardEnvOnce *shardEnv
	shardEnvErr  error
	shardEnvMu   sync.Mutex
)

// shardEnvFor returns the control plane, started and filled on first use,
// shared by both modes and the rounds of -count, stopped by TestMain.
func shardEnvFor(b *testing.B) *shardEnv {
	shardEnvMu.Lock()
	defer shardEnvMu.Unlock()
	if shardEnvOnce == nil && shardEnvErr == nil {
		if testing.Short() {
			shardObjects = 4000
		}
		shardEnvOnce, shardEnvErr = startShardEnv()
	}
	if shardEnvErr != nil {
		b.Fatal(shardEnvErr)
	}
	return shardEnvOnce
}

func stopShardEnvs() {
	if shardEnvOnce != nil {
		shardEnvOnce.env.Stop()
	}
}

// shardNamespaceOf is the namespace of the i-th ConfigMap: shardNamespace
// and 8 hex digits that differ from namespace to namespace throughout, as
// generated names do. Not a sequence (-00 to -63): the server places a
// namespace by plain 64-bit FNV-1a (KEP-5866), whose high bits barely move
// with the last bytes, and the 64 names shard-scale-00 to -63 fall into 2
// of the 64 slots: one or two replicas would hold every object.
func shardNamespaceOf(i int) string {
	return fmt.Sprintf("%s-%08x", shardNamespace, uint32(reflector.HashKey("", strconv.Itoa(i%shardNamespaces))))
}

func startShardEnv() (_ *shardEnv, err error) {
	ctx := context.Background()
	cfg := testenv.Config{APIServerFlags: []string{"--feature-gates=ShardedListAndWatch=true"}}
	env, err := testenv.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			env.Stop()
		}
	}()
	rc := reflector.WithProtobuf(env.Config())
	rc.QPS, rc.Burst = 2000, 4000
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	for i := -1; i < shardNamespaces; i++ {
		ns := shardNamespace
		if i >= 0 {
			ns = shardNamespaceOf(i)
		}
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	labelKey, labelValue, _ := strings.Cut(shardLabel, "=")
	value := strings.Repeat("x", 1024)
	var next atomic.Int64
	errs := make(chan error, srvWriters)
	var wg sync.WaitGroup
	for range srvWriters {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(shardObjects) {
					return
				}
				ns := shardNamespaceOf(int(i))
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%05d", i), Namespace: ns, Labels: map[string]string{labelKey: labelValue}}, Data: map[string]string{"v": value}}
				if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					errs <- err
					next.Store(int64(shardObjects))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	kc := filepath.Join(env.Dir(), "shard-bench.kubeconfig")
	if err := env.WriteKubeconfig(kc, testenv.AdminUser); err != nil {
		return nil, err
	}
	return &shardEnv{env: env, kubeconfig: kc, objects: shardObjects}, nil
}

// shardStatus is a replica's status line.
type shardStatus struct {
	ID         string `json:"id"`
	Members    int    `json:"members"`
	Slots      int    `json:"slots"`
	Objects    int    `json:"objects"`
	Synced     bool   `json:"synced"`
	Reconciled int64  `json:"reconciled"`
	Filtering  string `json:"filtering"`
	Heap       int64  `json:"heap,omitempty"`  // on "report"
	Recv       int64  `json:"recv,omitempty"`  // on "report"
	DrainMS    int64  `json:"drain,omitempty"` // on "go"
}

type shardResult struct {
	heap, recv, drain, share float64
	filtering                string
}

type shardProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	mu    sync.Mutex
	last  shardStatus
	reply chan shardStatus
	done  chan struct{}
}

// run starts n replicas sharding by field, waits until they have split the
// keys and reconciled each once, then measures.
func (e *shardEnv) run(n int, field string) (res shardResult, err error) {
	group := fmt.Sprintf("g%d", time.Now().UnixNano())
	procs := make([]*shardProc, n)
	defer func() {
		for _, p := range procs {
			if p != nil {
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
	}()
	for i := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
		cmd.Env = append(os.Environ(), "CTRLKIT_SHARD_REPLICA=r"+strconv.Itoa(i), "CTRLKIT_SHARD_GROUP="+group, "CTRLKIT_SHARD_KUBECONFIG="+e.kubeconfig, "CTRLKIT_SHARD_FIELD="+field)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return res, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return res, err
		}
		if err := cmd.Start(); err != nil {
			return res, err
		}
		p := &shardProc{cmd: cmd, stdin: stdin, reply: make(chan shardStatus, 4), done: make(chan struct{})}
		procs[i] = p
		go func() {
			defer close(p.done)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				var st shardStatus
				if json.Unmarshal(sc.Bytes(), &st) != nil {
					continue
				}
				if st.Heap != 0 || st.DrainMS != 0 {
					p.reply <- st
					continue
				}
				p.mu.Lock()
				p.last = st
				p.mu.Unlock()
			}
			_ = cmd.Wait()
		}()
	}
	// The replicas join together, once every process is up: how long a
	// process takes to start on a loaded machine is not the subject.
	for _, p := range procs {
		for {
			p.mu.Lock()
			up := p.last.ID != ""
			p.mu.Unlock()
			if up {
				break
			}
			select {
			case <-p.done:
				return res, errors.New("a replica exited before it started")
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	for _, p := range procs {
		if _, err := io.WriteString(p.stdin, "start\n"); err != nil {
			return res, err
		}
	}
	// Settled: every replica sees the others, the caches hold every key once,
	// each key was reconciled, and the slots have not moved for a second.
	deadline := time.Now().Add(3 * time.Minute)
	var stableSince time.Time
	var lastSlots []int
	for {
		if time.Now().After(deadline) {
			return res, errors.New("the replicas did not settle in 3 minutes")
		}
		time.Sleep(100 * time.Millisecond)
		objs, ok := 0, true
		var slots []int
		for _, p := range procs {
			p.mu.Lock()
			st := p.last
			p.mu.Unlock()
			objs += st.Objects
			slots = append(slots, st.Slots)
			ok = ok && st.Synced && st.Members == n && st.Reconciled >= int64(st.Objects)
		}
		if !ok || objs != e.objects || !slices.Equal(slots, lastSlots) {
			stableSince, lastSlots = time.Time{}, slots
			continue
		}
		if stableSince.IsZero() {
			stableSince = time.Now()
		}
		if time.Since(stableSince) > time.Second {
			break
		}
	}
	ask := func(cmd string) ([]shardStatus, error) {
		for _, p := range procs {
			if _, err := io.WriteString(p.stdin, cmd+"\n"); err != nil {
				return nil, err
			}
		}
		out := make([]shardStatus, len(procs))
		for i, p := range procs {
			select {
			case out[i] = <-p.reply:
			case <-time.After(2 * time.Minute):
				return nil, fmt.Errorf("replica %d did not answer %q", i, cmd)
			}
		}
		return out, nil
	}
	reports, err := ask("report")
	if err != nil {
		return res, err
	}
	for _, st := range reports {
		res.heap = max(res.heap, float64(st.Heap))
		res.recv = max(res.recv, float64(st.Recv))
		res.share = max(res.share, float64(st.Objects)/float64(e.objects))
		res.filtering = st.Filtering
	}
	drains, err := ask("go")
	if err != nil {
		return res, err
	}
	for _, st := range drains {
		res.drain = max(res.drain, float64(st.DrainMS))
	}
	for _, p := range procs {
		_ = p.stdin.Close() // the replica leaves
	}
	return res, nil
}

// runShardReplica is a replica process of BenchmarkShardScale: it prints its
// status as a JSON line every 100ms, runs its manager once told "start", and
// answers "report" (heap and bytes
// received) and "go" (reconcile every key again, and the time it took) on
// stdin; it leaves when stdin closes.
func runShardReplica() int {
	id := os.Getenv("CTRLKIT_SHARD_REPLICA")
	cfg, err := manager.LoadRESTConfig(os.Getenv("CTRLKIT_SHARD_KUBECONFIG"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg.QPS, cfg.Burst = 200, 400
	var recv atomic.Int64
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt, &recv} }
	m, err := manager.New(manager.Config{RESTConfig: cfg, Sharding: &manager.Sharding{
		Namespace: shardNamespace, Group: os.Getenv("CTRLKIT_SHARD_GROUP"), Identity: id, Field: os.Getenv("CTRLKIT_SHARD_FIELD"),
		LeaseDuration: 4 * time.Second, RenewPeriod: 400 * time.Millisecond, RenewDeadline: 2500 * time.Millisecond,
	}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	inf, err := manager.Typed(m, manager.Options[*corev1.ConfigMap]{LabelSelector: shardLabel, Shard: manager.ShardByObject, Transform: reflector.StripManagedFields[*corev1.ConfigMap]})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var reconciled atomic.Int64
	again := &keyTrigger{}
	ctl := reconcile.New(reconcile.Func[types.NamespacedName](func(context.Context, types.NamespacedName) (reconcile.Result, error) {
		time.Sleep(shardWork)
		reconciled.Add(1)
		return reconcile.Result{}, nil
	}), reconcile.Config[types.NamespacedName]{Name: "scale", Workers: shardWorkers, Restrictable: true})
	if err := ctl.Watch(reconcile.FromInformer(inf, reconcile.ByObject[*corev1.ConfigMap]())); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := ctl.Watch(again); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := manager.AddSharded(m, ctl, manager.OwnsKey); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	base := srvLiveHeap()
	var outMu sync.Mutex
	emit := func(st shardStatus) {
		s, _ := m.ShardStatus()
		st.ID, st.Members, st.Slots = id, len(s.Members), s.Slots
		st.Objects, st.Synced, st.Reconciled = inf.Indexer().Len(), inf.HasSynced(), reconciled.Load()
		st.Filtering = inf.Health().ShardFiltering
		line, _ := json.Marshal(st)
		outMu.Lock()
		os.Stdout.Write(append(line, '\n'))
		outMu.Unlock()
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	go func() {
		for range tick.C {
			emit(shardStatus{})
		}
	}()
	sc := bufio.NewScanner(os.Stdin)
	if !sc.Scan() || sc.Text() != "start" {
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- m.Run(ctx) }()
	for sc.Scan() {
		switch sc.Text() {
		case "report":
			heap := int64(srvLiveHeap()) - int64(base)
			emit(shardStatus{Heap: max(heap, 1), Recv: recv.Load()})
		case "go":
			keys := inf.Indexer().List()
			from := reconciled.Load()
			t0 := time.Now()
			again.fire(keys)
			for reconciled.Load()-from < int64(len(keys)) {
				time.Sleep(time.Millisecond)
			}
			emit(shardStatus{DrainMS: max(time.Since(t0).Milliseconds(), 1)})
		}
	}
	cancel()
	if err := <-runDone; err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// keyTrigger is a reconcile.Source that enqueues the keys of the objects
// given to fire.
type keyTrigger struct {
	mu      sync.Mutex
	enqueue func(types.NamespacedName, reconcile.Priority)
}

func (k *keyTrigger) Name() string { return "trigger" }
func (k *keyTrigger) Start(enqueue func(types.NamespacedName, reconcile.Priority)) (func(), error) {
	k.mu.Lock()
	k.enqueue = enqueue
	k.mu.Unlock()
	return func() {}, nil
}
func (k *keyTrigger) HasSynced() bool                                              { return true }
func (k *keyTrigger) AppendKeys(dst []types.NamespacedName) []types.NamespacedName { return dst }
func (k *keyTrigger) fire(objs []*corev1.ConfigMap) {
	k.mu.Lock()
	enqueue := k.enqueue
	k.mu.Unlock()
	for _, o := range objs {
		enqueue(types.NamespacedName{Namespace: o.Namespace, Name: o.Name}, reconcile.Live)
	}
}

// countingTransport counts the bytes of response bodies.
type countingTransport struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (c countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(req)
	if resp != nil && resp.Body != nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: c.n}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}
