//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector"
)

const ownerLabel = "ctrlkit.test/owner"

type key = types.NamespacedName

// mirror keeps, for every owner ConfigMap, a Secret of the same name that it
// controls, holding the ConfigMap's data; a Secret whose owner is gone is deleted
// (testenv runs no garbage collector).
type mirror struct {
	client  kubernetes.Interface
	owners  *informer.Informer[*corev1.ConfigMap]
	secrets *informer.Informer[*corev1.Secret]
}

func (m *mirror) Reconcile(ctx context.Context, k key) (reconcile.Result, error) {
	cm, err := m.owners.Lister().Get(k.Namespace, k.Name)
	if apierrors.IsNotFound(err) {
		err := m.client.CoreV1().Secrets(k.Namespace).Delete(ctx, k.Name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	ref := *metav1.NewControllerRef(cm, corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	sec, err := m.secrets.Lister().Get(k.Namespace, k.Name)
	if apierrors.IsNotFound(err) {
		sec = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
			Namespace: k.Namespace, Name: k.Name, OwnerReferences: []metav1.OwnerReference{ref},
		}, Data: data}
		_, err = m.client.CoreV1().Secrets(k.Namespace).Create(ctx, sec, metav1.CreateOptions{})
		return reconcile.Result{}, err
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	owner := metav1.GetControllerOfNoCopy(sec)
	if owner != nil && owner.UID == cm.UID && equalData(sec.Data, data) {
		return reconcile.Result{}, nil
	}
	sec = sec.DeepCopy()
	sec.OwnerReferences = []metav1.OwnerReference{ref}
	sec.Data = data
	_, err = m.client.CoreV1().Secrets(k.Namespace).Update(ctx, sec, metav1.UpdateOptions{})
	return reconcile.Result{}, err
}

func equalData(a, b map[string][]byte) bool {
	return maps.EqualFunc(a, b, func(x, y []byte) bool { return string(x) == string(y) })
}

func clientset(t *testing.T) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func createNamespace(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// replica is one running controller with its informers.
type replica struct {
	cancel context.CancelFunc
	done   chan error // Run's result
	wg     sync.WaitGroup
}

// stop cancels the controller and its informers and returns Run's error.
func (r *replica) stop() error {
	r.cancel()
	err := <-r.done
	r.wg.Wait()
	return err
}

// startMirror runs a mirror controller over namespace ns; wrap, if set, wraps its
// reconciler.
func startMirror(t *testing.T, ns string, cfg reconcile.Config[key], wrap func(reconcile.Reconciler[key]) reconcile.Reconciler[key]) *replica {
	t.Helper()
	c := clientset(t)
	owners := informer.New(reflector.FromTyped(c.CoreV1().ConfigMaps(ns)), informer.Config[*corev1.ConfigMap]{
		Reflector: reflector.Config[*corev1.ConfigMap]{LabelSelector: ownerLabel},
	})
	secrets := informer.New(reflector.FromTyped(c.CoreV1().Secrets(ns)), informer.Config[*corev1.Secret]{})
	var rec reconcile.Reconciler[key] = &mirror{client: c, owners: owners, secrets: secrets}
	if wrap != nil {
		rec = wrap(rec)
	}
	if cfg.Name == "" {
		cfg.Name = "mirror"
	}
	ctl := reconcile.New(rec, cfg)
	if err := ctl.Watch(reconcile.FromInformer(owners, reconcile.ByObject[*corev1.ConfigMap]())); err != nil {
		t.Fatal(err)
	}
	if err := ctl.Watch(reconcile.FromInformer(secrets, reconcile.ByControllerOwner[*corev1.Secret](schema.GroupKind{Kind: "ConfigMap"}))); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{cancel: cancel, done: make(chan error, 1)}
	r.wg.Go(func() { _ = owners.Run(ctx) })
	r.wg.Go(func() { _ = secrets.Run(ctx) })
	go func() { r.done <- ctl.Run(ctx) }()
	t.Cleanup(func() { r.cancel(); r.wg.Wait() })
	return r
}

func ownerCM(ns, name, value string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{ownerLabel: "yes"}},
		Data:       map[string]string{"value": value},
	}
}

// converged reports whether the Secrets of ns mirror exactly its owner ConfigMaps,
// and if not, why.
func converged(ctx context.Context, c kubernetes.Interface, ns string) (string, error) {
	cms, err := c.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: ownerLabel})
	if err != nil {
		return "", err
	}
	secs, err := c.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	want := map[string]*corev1.ConfigMap{}
	for i := range cms.Items {
		want[cms.Items[i].Name] = &cms.Items[i]
	}
	got := map[string]*corev1.Secret{}
	for i := range secs.Items {
		got[secs.Items[i].Name] = &secs.Items[i]
	}
	for name, cm := range want {
		s, ok := got[name]
		if !ok {
			return fmt.Sprintf("secret %s missing", name), nil
		}
		if string(s.Data["value"]) != cm.Data["value"] {
			return fmt.Sprintf("secret %s has %q, configmap %q", name, s.Data["value"], cm.Data["value"]), nil
		}
		if o := metav1.GetControllerOf(s); o == nil || o.UID != cm.UID {
			return fmt.Sprintf("secret %s not controlled by its configmap", name), nil
		}
	}
	for name := range got {
		if want[name] == nil {
			return fmt.Sprintf("secret %s has no owner configmap", name), nil
		}
	}
	return "", nil
}

// waitConverged polls until ns has converged, failing after timeout.
func waitConverged(t *testing.T, c kubernetes.Interface, ns string, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		why, err := converged(ctx, c, ns)
		if err == nil && why == "" {
			return
		}
		if err != nil {
			last = err.Error()
		} else {
			last = why
		}
		select {
		case <-ctx.Done():
			t.Fatalf("namespace %s did not converge within %v: %s", ns, timeout, last)
		case <-tick.C:
		}
	}
}

// storm creates n owners, updates each several times, deletes every third and
// re-creates every ninth, and deletes a few Secrets behind the controller's back.
func storm(t *testing.T, c kubernetes.Interface, ns string, n int, round string) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			name := fmt.Sprintf("cm-%03d", i)
			cms := c.CoreV1().ConfigMaps(ns)
			cm, err := cms.Create(ctx, ownerCM(ns, name, round+"-0"), metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				cm, err = cms.Get(ctx, name, metav1.GetOptions{})
			}
			if err != nil {
				errs <- err
				return
			}
			for v := 1; v <= 3; v++ {
				cm = cm.DeepCopy()
				cm.Data = map[string]string{"value": fmt.Sprintf("%s-%d", round, v)}
				if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
					errs <- err
					return
				}
			}
			if i%3 == 0 {
				if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
					errs <- err
					return
				}
				if i%9 == 0 {
					if _, err := cms.Create(ctx, ownerCM(ns, name, round+"-again"), metav1.CreateOptions{}); err != nil {
						errs <- err
					}
				}
			}
			if i%7 == 1 {
				err := c.CoreV1().Secrets(ns).Delete(ctx, name, metav1.DeleteOptions{})
				if err != nil && !apierrors.IsNotFound(err) {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestConvergesAfterStorm(t *testing.T) {
	c := clientset(t)
	const ns = "storm"
	createNamespace(t, c, ns)
	r := startMirror(t, ns, reconcile.Config[key]{Workers: 4}, nil)
	storm(t, c, ns, 60, "a")
	waitConverged(t, c, ns, 60*time.Second)
	storm(t, c, ns, 60, "b")
	waitConverged(t, c, ns, 60*time.Second)
	if err := r.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestConvergesAfterAPIServerRestart(t *testing.T) {
	c := clientset(t)
	const ns = "restart"
	createNamespace(t, c, ns)
	r := startMirror(t, ns, reconcile.Config[key]{Workers: 2}, nil)
	storm(t, c, ns, 30, "a")
	// A graceful restart, then a crash; changes right before and after each.
	for i, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		if err := env.RestartAPIServer(context.Background(), sig); err != nil {
			t.Fatal(err)
		}
		storm(t, c, ns, 30, fmt.Sprintf("after-%d", i))
	}
	waitConverged(t, c, ns, 90*time.Second)
	if err := r.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestConvergesAfterDowntime(t *testing.T) {
	c := clientset(t)
	const ns = "downtime"
	createNamespace(t, c, ns)
	r := startMirror(t, ns, reconcile.Config[key]{Workers: 2}, nil)
	storm(t, c, ns, 30, "a")
	waitConverged(t, c, ns, 60*time.Second)
	if err := r.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// While no controller runs: owners deleted (their Secrets stay: no GC) and
	// changed. A new controller must find both from its start-up lists alone.
	ctx := context.Background()
	for i := range 30 {
		name := fmt.Sprintf("cm-%03d", i)
		var err error
		if i%2 == 0 {
			err = c.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{})
		} else {
			var cm *corev1.ConfigMap
			if cm, err = c.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
				cm.Data = map[string]string{"value": "while-down"}
				_, err = c.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
			}
		}
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	if why, err := converged(ctx, c, ns); err != nil || why == "" {
		t.Fatalf("namespace converged with no controller running (%v): the test proves nothing", err)
	}
	r = startMirror(t, ns, reconcile.Config[key]{Workers: 2}, nil)
	waitConverged(t, c, ns, 60*time.Second)
	if err := r.stop(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
}
