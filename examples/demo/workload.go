package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"

	"github.com/ctrlkit/ctrlkit/examples/network-controller/network"
	"github.com/ctrlkit/ctrlkit/examples/replicaset/podset"
	"github.com/ctrlkit/ctrlkit/examples/sidecar-injector/injector"
)

// Bounds of the workload: how many objects of each kind it keeps alive.
const (
	minObjects = 3
	maxObjects = 16
	// sidecarEvery is how often, at most, the sidecar definition changes (which makes the
	// injector re-patch every opted-in Deployment).
	sidecarEvery = 15 * time.Second
	// lagWaiters bounds the goroutines measuring cache lag at once.
	lagWaiters = 64
)

// cacheWaiter is what each example controller offers to measure cache lag.
type cacheWaiter interface {
	WaitForCache(ctx context.Context, rv string) error
}

// kind is one of the workload's object kinds and the controller that handles it.
type kind struct {
	name   string
	stats  *stats
	waiter cacheWaiter
	alive  map[string]bool // names the generator created and has not deleted; generator only
	next   int             // suffix of the next name
	live   atomic.Int64    // len(alive), for the progress line
}

// workload creates, changes and deletes Deployments, Networks and PodSets at random, and
// measures how long each write takes to reach the controller's cache.
type workload struct {
	c     *clients
	rng   *rand.Rand
	kinds [3]*kind // deployments, networks, podsets

	sidecarVersion int
	lastSidecar    time.Time

	writes, creates, updates, deletes, conflicts atomic.Int64

	lagWG  sync.WaitGroup
	lagSem chan struct{}
	lagCtx context.Context // outlives the generator so late lags are still measured
	stop   context.CancelFunc
}

func newWorkload(c *clients, seed uint64, s []*stats, inj, netc, psc cacheWaiter) *workload {
	ctx, stop := context.WithCancel(context.Background())
	w := &workload{
		c:              c,
		rng:            rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		sidecarVersion: 1,
		lastSidecar:    time.Now(),
		lagSem:         make(chan struct{}, lagWaiters),
		lagCtx:         ctx,
		stop:           stop,
	}
	for i, name := range []string{"Deployments", "Networks", "PodSets"} {
		w.kinds[i] = &kind{name: name, stats: s[i], waiter: []cacheWaiter{inj, netc, psc}[i], alive: map[string]bool{}}
	}
	return w
}

// run writes at about rate writes per second for duration, or until ctx ends. Writes use
// ctx itself, not a deadline, so that the last one is not cut short half-way.
func (w *workload) run(ctx context.Context, duration time.Duration, rate float64) error {
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	end := time.Now().Add(duration)
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-tick.C:
			if now.After(end) {
				return nil
			}
		}
		if err := w.step(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// step makes one random write.
func (w *workload) step(ctx context.Context) error {
	if time.Since(w.lastSidecar) > sidecarEvery && w.rng.IntN(10) == 0 {
		return w.changeSidecar(ctx)
	}
	i := w.rng.IntN(len(w.kinds))
	k := w.kinds[i]
	start := time.Now()
	op := w.rng.IntN(100)
	switch {
	case len(k.alive) < minObjects || (op < 35 && len(k.alive) < maxObjects):
		name := fmt.Sprintf("%s-%d", [3]string{"dep", "net", "ps"}[i], k.next)
		k.next++
		rv, err := [3]func(context.Context, string) (string, error){w.createDeployment, w.createNetwork, w.createPodSet}[i](ctx, name)
		if err != nil {
			return fmt.Errorf("create %s %s: %w", k.name, name, err)
		}
		k.alive[name] = true
		k.live.Store(int64(len(k.alive)))
		w.creates.Add(1)
		w.measure(k, rv, start)
	case op < 80:
		name := w.pick(k)
		var rv string
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var err error
			rv, err = [3]func(context.Context, string) (string, error){w.updateDeployment, w.updateNetwork, w.scalePodSet}[i](ctx, name)
			if apierrors.IsConflict(err) {
				w.conflicts.Add(1)
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("update %s %s: %w", k.name, name, err)
		}
		w.updates.Add(1)
		w.measure(k, rv, start)
	default:
		name := w.pick(k)
		if err := w.delete(ctx, i, name); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s %s: %w", k.name, name, err)
		}
		delete(k.alive, name)
		k.live.Store(int64(len(k.alive)))
		w.deletes.Add(1)
	}
	w.writes.Add(1)
	return nil
}

// pick returns one of the live names of k at random.
func (w *workload) pick(k *kind) string {
	n := w.rng.IntN(len(k.alive))
	for name := range k.alive {
		if n == 0 {
			return name
		}
		n--
	}
	panic("unreachable")
}

// measure waits, in the background, until the controller's cache has applied rv, and
// records the time from start (just before the write was sent) until then.
func (w *workload) measure(k *kind, rv string, start time.Time) {
	select {
	case w.lagSem <- struct{}{}:
	default:
		return // enough measurements in flight; skip this one rather than slow the generator
	}
	w.lagWG.Go(func() {
		defer func() { <-w.lagSem }()
		ctx, cancel := context.WithTimeout(w.lagCtx, 30*time.Second)
		defer cancel()
		if k.waiter.WaitForCache(ctx, rv) == nil {
			k.stats.lag(time.Since(start))
		}
	})
}

// waitLag waits for the lag measurements in flight, giving up on them after a few seconds.
func (w *workload) waitLag() {
	t := time.AfterFunc(5*time.Second, w.stop)
	w.lagWG.Wait()
	t.Stop()
	w.stop()
}

func (w *workload) changeSidecar(ctx context.Context) error {
	w.sidecarVersion++
	w.lastSidecar = time.Now()
	_, err := w.c.kube.CoreV1().ConfigMaps(injector.DefaultConfigNamespace).Update(ctx, sidecarConfigMap(w.sidecarVersion), metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("update the sidecar ConfigMap: %w", err)
	}
	w.updates.Add(1)
	w.writes.Add(1)
	return nil
}

// sidecarConfigMap is the sidecar definition at a version: an Envoy proxy, as in the seeds.
func sidecarConfigMap(version int) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: injector.DefaultConfigNamespace, Name: injector.DefaultConfigName},
		Data: map[string]string{injector.ConfigKey: fmt.Sprintf(`containers:
  - name: envoy
    image: envoyproxy/envoy:v1.%d.0
    args: ["--config-path", "/etc/envoy/envoy.yaml"]
    volumeMounts:
      - name: envoy-conf
        mountPath: /etc/envoy
volumes:
  - name: envoy-conf
    configMap:
      name: envoy
`, 30+version)},
	}
}

func (w *workload) createDeployment(ctx context.Context, name string) (string, error) {
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: demoNS, Name: name},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx:1.27"}}},
			},
		},
	}
	if w.rng.IntN(10) < 6 {
		d.Annotations = map[string]string{injector.InjectAnnotation: "true"}
	}
	d, err := w.c.kube.AppsV1().Deployments(demoNS).Create(ctx, d, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return d.ResourceVersion, nil
}

// updateDeployment either switches the opt-in annotation or changes the user's own image.
func (w *workload) updateDeployment(ctx context.Context, name string) (string, error) {
	deps := w.c.kube.AppsV1().Deployments(demoNS)
	d, err := deps.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if w.rng.IntN(2) == 0 {
		if injector.OptedIn(d) {
			delete(d.Annotations, injector.InjectAnnotation)
		} else {
			metav1.SetMetaDataAnnotation(&d.ObjectMeta, injector.InjectAnnotation, "true")
		}
	} else {
		for i := range d.Spec.Template.Spec.Containers {
			if c := &d.Spec.Template.Spec.Containers[i]; c.Name == "app" {
				c.Image = fmt.Sprintf("nginx:1.%d", 20+w.rng.IntN(8))
			}
		}
	}
	d, err = deps.Update(ctx, d, metav1.UpdateOptions{})
	if err != nil {
		return "", err
	}
	return d.ResourceVersion, nil
}

// networkSpec returns a valid spec most of the time, and otherwise one of the two invalid
// kinds the controller must reject: a malformed CIDR or a gateway outside the CIDR.
func (w *workload) networkSpec() network.Spec {
	a, b := w.rng.IntN(250), w.rng.IntN(250)
	switch w.rng.IntN(10) {
	case 0:
		return network.Spec{CIDR: fmt.Sprintf("10.%d.%d.0/33", a, b), Gateway: fmt.Sprintf("10.%d.%d.1", a, b)}
	case 1:
		return network.Spec{CIDR: fmt.Sprintf("10.%d.%d.0/24", a, b), Gateway: "192.168.0.1"}
	default:
		return network.Spec{CIDR: fmt.Sprintf("10.%d.%d.0/24", a, b), Gateway: fmt.Sprintf("10.%d.%d.1", a, b)}
	}
}

func (w *workload) createNetwork(ctx context.Context, name string) (string, error) {
	n := &network.Network{
		TypeMeta:   metav1.TypeMeta{APIVersion: network.Group + "/" + network.Version, Kind: network.Kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: demoNS, Name: name},
		Spec:       w.networkSpec(),
	}
	u, err := network.ToUnstructured(n)
	if err != nil {
		return "", err
	}
	u, err = w.c.dyn.Resource(network.GroupVersionResource).Namespace(demoNS).Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return u.GetResourceVersion(), nil
}

func (w *workload) updateNetwork(ctx context.Context, name string) (string, error) {
	nets := w.c.dyn.Resource(network.GroupVersionResource).Namespace(demoNS)
	u, err := nets.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	spec := w.networkSpec()
	if err := unstructured.SetNestedField(u.Object, spec.CIDR, "spec", "cidr"); err != nil {
		return "", err
	}
	if err := unstructured.SetNestedField(u.Object, spec.Gateway, "spec", "gateway"); err != nil {
		return "", err
	}
	u, err = nets.Update(ctx, u, metav1.UpdateOptions{})
	if err != nil {
		return "", err
	}
	return u.GetResourceVersion(), nil
}

func (w *workload) createPodSet(ctx context.Context, name string) (string, error) {
	labels := map[string]string{"podset": name}
	replicas := int32(1 + w.rng.IntN(4))
	ps := &podset.PodSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: podset.Group + "/" + podset.Version, Kind: podset.Kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: demoNS, Name: name},
		Spec: podset.PodSetSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
	u, err := ps.ToUnstructured()
	if err != nil {
		return "", err
	}
	u, err = w.c.dyn.Resource(podset.GroupVersionResource).Namespace(demoNS).Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return u.GetResourceVersion(), nil
}

func (w *workload) scalePodSet(ctx context.Context, name string) (string, error) {
	sets := w.c.dyn.Resource(podset.GroupVersionResource).Namespace(demoNS)
	u, err := sets.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if err := unstructured.SetNestedField(u.Object, int64(w.rng.IntN(6)), "spec", "replicas"); err != nil {
		return "", err
	}
	u, err = sets.Update(ctx, u, metav1.UpdateOptions{})
	if err != nil {
		return "", err
	}
	return u.GetResourceVersion(), nil
}

func (w *workload) delete(ctx context.Context, kind int, name string) error {
	switch kind {
	case 0:
		return w.c.kube.AppsV1().Deployments(demoNS).Delete(ctx, name, metav1.DeleteOptions{})
	case 1:
		return w.c.dyn.Resource(network.GroupVersionResource).Namespace(demoNS).Delete(ctx, name, metav1.DeleteOptions{})
	default:
		// No garbage collector runs in this control plane, so the Pods would stay; delete
		// them in the foreground way a real cluster's collector would, after the PodSet.
		if err := w.c.dyn.Resource(podset.GroupVersionResource).Namespace(demoNS).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		return w.c.kube.CoreV1().Pods(demoNS).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)},
			metav1.ListOptions{LabelSelector: "podset=" + name})
	}
}

// summary prints the workload's totals and each controller's figures.
func (w *workload) summary() {
	fmt.Printf("workload: %d writes (%d creates, %d updates, %d deletes), %d update conflicts retried\n",
		w.writes.Load(), w.creates.Load(), w.updates.Load(), w.deletes.Load(), w.conflicts.Load())
	for _, k := range w.kinds {
		lags := k.stats.totalLag()
		fmt.Printf("  %-8s reconciles %6d (failed and retried %d), deepest queue %3d, cache lag p50 %s p99 %s max %s over %d writes\n",
			k.stats.name, k.stats.reconciles.Load(), k.stats.failed.Load(), k.stats.maxDepth.Load(),
			ms(quantile(lags, 0.5)), ms(quantile(lags, 0.99)), ms(quantile(lags, 1)), len(lags))
	}
}
