//go:build e2e

// Package e2e tests the sidecar injector against the real etcd and kube-apiserver that
// testenv starts, running the controller as a user holding exactly the rights of
// ../rbac.yaml: injection on opt-in, no second patch, removal on opt-out, re-patching
// of every opted-in Deployment when the sidecar ConfigMap changes, bad definitions and
// name clashes reported and left alone, and users' own changes kept throughout.
package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/examples/sidecar-injector/injector"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/internal/rbacfile"
	"github.com/ctrlkit/ctrlkit/internal/testrun"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.RunTests(m, testenv.Config{Users: []testenv.User{{Name: "controller"}}}, &env, leakcheck.Check))
}

// The sidecar ConfigMap of rbac.yaml; the tests run one after the other and share it.
const (
	cmNamespace = injector.DefaultConfigNamespace
	cmName      = injector.DefaultConfigName
)

// envoyV1 sets fields the API server defaults around (port protocol, probe timings,
// the volume's defaultMode) or normalizes (quantities), to show that the injected
// sidecar is not re-patched for them.
const envoyV1 = `
containers:
  - name: envoy
    image: envoyproxy/envoy:v1
    args: ["--config-path", "/etc/envoy/envoy.json"]
    ports:
      - containerPort: 9901
    resources:
      limits: {cpu: "1000m", memory: "512Mi"}
      requests: {cpu: "0.1", memory: "64Mi"}
    readinessProbe:
      httpGet: {path: /ready, port: 9901}
    volumeMounts:
      - name: envoy-conf
        mountPath: /etc/envoy
volumes:
  - name: envoy-conf
    configMap:
      name: envoy
`

const envoyV2 = `
containers:
  - name: envoy
    image: envoyproxy/envoy:v2
    volumeMounts:
      - name: envoy-conf-v2
        mountPath: /etc/envoy
volumes:
  - name: envoy-conf-v2
    configMap:
      name: envoy-v2
`

func admin(t *testing.T) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// patchCounter counts the successful PATCH requests of the controller, per Deployment.
type patchCounter struct {
	mu sync.Mutex
	n  map[string]int // Deployment name → successful PATCHes
}

func (p *patchCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil && req.Method == http.MethodPatch && resp.StatusCode == http.StatusOK {
			p.mu.Lock()
			p.n[path.Base(req.URL.Path)]++
			p.mu.Unlock()
		}
		return resp, err
	})
}

func (p *patchCounter) of(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[name]
}

func (p *patchCounter) total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, v := range p.n {
		n += v
	}
	return n
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// reconciles counts reconciles, through reconcile.Metrics.
type reconciles struct{ started, n atomic.Int64 }

func (r *reconciles) Workers(int)                                        {}
func (r *reconciles) ReconcileStarted()                                  { r.started.Add(1) }
func (r *reconciles) ReconcileFinished(reconcile.Outcome, time.Duration) { r.n.Add(1) }
func (r *reconciles) Panicked()                                          {}
func (r *reconciles) SourcePanicked()                                    {}

// harness is a running controller watching one namespace.
type harness struct {
	ns         string
	admin      kubernetes.Interface
	ctl        *injector.Controller
	patches    *patchCounter
	reconciles *reconciles
}

// start grants the controller user the rights of rbac.yaml, creates namespace ns,
// removes any sidecar ConfigMap left by another test, sets it to definition unless
// that is empty, and runs the controller (as that user, in a manager of its own)
// over ns until the test ends.
func start(t *testing.T, ns, definition string) *harness {
	t.Helper()
	ctx := context.Background()
	c := admin(t)
	for _, name := range []string{cmNamespace, ns} {
		_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	if err := rbacfile.Apply(ctx, c, "../rbac.yaml", "controller"); err != nil {
		t.Fatal(err)
	}
	h := &harness{ns: ns, admin: c, patches: &patchCounter{n: map[string]int{}}, reconciles: &reconciles{}}
	h.deleteConfig(t)
	if definition != "" {
		h.setConfig(t, definition)
	}

	cfg, err := env.UserConfig("controller")
	if err != nil {
		t.Fatal(err)
	}
	cfg.WrapTransport = h.patches.wrap
	m, err := manager.New(manager.Config{RESTConfig: cfg})
	if err != nil {
		t.Fatal(err)
	}
	h.ctl, err = injector.New(m, injector.Options{Namespace: ns, Metrics: h.reconciles, ResyncPeriod: -1})
	if err != nil {
		t.Fatal(err)
	}
	testrun.Run(t, m.Run)
	return h
}

func (h *harness) setConfig(t *testing.T, definition string) *corev1.ConfigMap {
	t.Helper()
	ctx := context.Background()
	cms := h.admin.CoreV1().ConfigMaps(cmNamespace)
	cm, err := cms.Get(ctx, cmName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm, err = cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: cmNamespace, Name: cmName},
			Data:       map[string]string{injector.ConfigKey: definition},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm
	}
	if err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{injector.ConfigKey: definition}
	cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

func (h *harness) deleteConfig(t *testing.T) {
	t.Helper()
	err := h.admin.CoreV1().ConfigMaps(cmNamespace).Delete(context.Background(), cmName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// deployment returns a Deployment with the user containers named, each with its own
// image "<name>:1", and a volume "data"; it opts in if optIn.
func deployment(ns, name string, optIn bool, containers ...string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{"owner": "team-a"}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				},
			},
		},
	}
	for _, c := range containers {
		d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{
			Name: c, Image: c + ":1",
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
		})
	}
	if optIn {
		d.Annotations[injector.InjectAnnotation] = "true"
	}
	return d
}

func (h *harness) create(t *testing.T, d *appsv1.Deployment) *appsv1.Deployment {
	t.Helper()
	out, err := h.admin.AppsV1().Deployments(h.ns).Create(context.Background(), d, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (h *harness) get(t *testing.T, name string) *appsv1.Deployment {
	t.Helper()
	d, err := h.admin.AppsV1().Deployments(h.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// update changes a Deployment as a user would (read, modify, write), retrying on
// conflicts with the controller's writes.
func (h *harness) update(t *testing.T, name string, change func(*appsv1.Deployment)) *appsv1.Deployment {
	t.Helper()
	for {
		d := h.get(t, name)
		change(d)
		out, err := h.admin.AppsV1().Deployments(h.ns).Update(context.Background(), d, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
}

// waitFor polls cond until it reports done, failing the test after timeout with the
// last reason cond gave.
func waitFor(t *testing.T, timeout time.Duration, cond func() (why string, done bool)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		why, done := cond()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not done after %v: %s", timeout, why)
		}
		<-tick.C
	}
}

// settle waits until the controller has finished more than after reconciles and then
// gone quiet: no reconcile running and none finished for 500ms. Take after before
// making a change; with resync off, the change's reconcile is then over when settle
// returns (unless the watch event took longer than 500ms to arrive, in which case a
// test checking that nothing happened could pass wrongly, but never fail wrongly).
func (h *harness) settle(t *testing.T, after int64) {
	t.Helper()
	last, since := int64(-1), time.Now()
	waitFor(t, 20*time.Second, func() (string, bool) {
		n, started := h.reconciles.n.Load(), h.reconciles.started.Load()
		if n != last || started != n {
			last, since = n, time.Now()
		}
		return fmt.Sprintf("%d reconciles (%d started), waiting for more than %d and quiet", n, started, after),
			n > after && time.Since(since) >= 500*time.Millisecond
	})
}

func names[T any](items []T, name func(T) string) []string {
	out := []string{}
	for _, it := range items {
		out = append(out, name(it))
	}
	return out
}

func containerNames(d *appsv1.Deployment) []string {
	return names(d.Spec.Template.Spec.Containers, func(c corev1.Container) string { return c.Name })
}

func volumeNames(d *appsv1.Deployment) []string {
	return names(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) string { return v.Name })
}

func container(d *appsv1.Deployment, name string) *corev1.Container {
	for i, c := range d.Spec.Template.Spec.Containers {
		if c.Name == name {
			return &d.Spec.Template.Spec.Containers[i]
		}
	}
	return nil
}

// waitSidecar waits until Deployment name carries exactly the wanted containers and
// volumes, envoy with image envoyImage ("" for no envoy) and a record to match.
func (h *harness) waitSidecar(t *testing.T, name string, containers, volumes []string, envoyImage string) *appsv1.Deployment {
	t.Helper()
	var d *appsv1.Deployment
	waitFor(t, 20*time.Second, func() (string, bool) {
		d = h.get(t, name)
		got := fmt.Sprintf("%s: containers %v volumes %v annotations %v; want containers %v volumes %v envoy image %q",
			name, containerNames(d), volumeNames(d), d.Annotations, containers, volumes, envoyImage)
		if !slices.Equal(containerNames(d), containers) || !slices.Equal(volumeNames(d), volumes) {
			return got, false
		}
		rec, err := injector.ReadRecord(d)
		if err != nil {
			return err.Error(), false
		}
		if envoyImage == "" {
			return got, rec == nil
		}
		return got, rec != nil && container(d, "envoy").Image == envoyImage
	})
	return d
}

// waitEvent waits for an Event of the given reason about Deployment name.
func (h *harness) waitEvent(t *testing.T, name, reason string) *corev1.Event {
	t.Helper()
	return h.waitEventSaying(t, name, reason, "")
}

// waitEventSaying waits for an Event of the given reason about Deployment name whose
// message contains text.
func (h *harness) waitEventSaying(t *testing.T, name, reason, text string) *corev1.Event {
	t.Helper()
	var found *corev1.Event
	waitFor(t, 20*time.Second, func() (string, bool) {
		evs, err := h.admin.CoreV1().Events(h.ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err.Error(), false
		}
		var seen []string
		for i, ev := range evs.Items {
			if ev.InvolvedObject.Kind == "Deployment" && ev.InvolvedObject.Name == name {
				if ev.Reason == reason && strings.Contains(ev.Message, text) {
					found = &evs.Items[i]
					return "", true
				}
				seen = append(seen, ev.Reason)
			}
		}
		return fmt.Sprintf("no %s event saying %q for %s; events: %v", reason, text, name, seen), false
	})
	if found.Source.Component != injector.EventSource {
		t.Errorf("event source %q", found.Source.Component)
	}
	return found
}
