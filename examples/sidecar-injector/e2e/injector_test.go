//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/examples/sidecar-injector/injector"
)

var (
	withEnvoy   = []string{"app", "envoy"}
	dataAndConf = []string{"data", "envoy-conf"}
	dataAndV2   = []string{"data", "envoy-conf-v2"}
)

func hashOf(t *testing.T, definition string) string {
	t.Helper()
	sc, err := injector.ParseSidecar("test", []byte(definition))
	if err != nil {
		t.Fatal(err)
	}
	return sc.Hash()
}

func TestInjectsOnOptIn(t *testing.T) {
	h := start(t, "inject", envoyV1)
	h.create(t, deployment(h.ns, "web", true, "app"))
	plain := h.create(t, deployment(h.ns, "plain", false, "app"))

	d := h.waitSidecar(t, "web", withEnvoy, dataAndConf, "envoyproxy/envoy:v1")
	envoy := container(d, "envoy")
	if !slices.Equal(envoy.Args, []string{"--config-path", "/etc/envoy/envoy.json"}) ||
		len(envoy.VolumeMounts) != 1 || envoy.VolumeMounts[0].MountPath != "/etc/envoy" {
		t.Errorf("envoy container not as defined: %+v", envoy)
	}
	if app := container(d, "app"); app.Image != "app:1" {
		t.Errorf("user container changed: %+v", app)
	}
	rec, err := injector.ReadRecord(d)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Hash != hashOf(t, envoyV1) || !slices.Equal(rec.Containers, []string{"envoy"}) || !slices.Equal(rec.Volumes, []string{"envoy-conf"}) {
		t.Errorf("record %+v", rec)
	}
	if d.Annotations["owner"] != "team-a" {
		t.Errorf("user annotation lost: %v", d.Annotations)
	}
	h.waitEvent(t, "web", injector.ReasonInjected)

	// Opting in later works the same way.
	n := h.reconciles.n.Load()
	h.update(t, "plain", func(d *appsv1.Deployment) { d.Annotations[injector.InjectAnnotation] = "true" })
	h.waitSidecar(t, "plain", withEnvoy, dataAndConf, "envoyproxy/envoy:v1")

	// A Deployment that does not opt in is never written to.
	other := h.create(t, deployment(h.ns, "other", false, "app"))
	if err := h.ctl.WaitForCache(t.Context(), other.ResourceVersion); err != nil {
		t.Fatalf("WaitForCache: %v", err)
	}
	h.settle(t, n)
	if got := h.get(t, "other"); got.ResourceVersion != other.ResourceVersion || h.patches.of("other") != 0 {
		t.Errorf("a Deployment not opted in was patched: %d patches, resourceVersion %s → %s",
			h.patches.of("other"), other.ResourceVersion, got.ResourceVersion)
	}
	if plain.ResourceVersion == h.get(t, "plain").ResourceVersion {
		t.Error("plain was not patched after opting in")
	}

	// The controller did all this without the right to update (or even get) a
	// Deployment: PATCH is all it can write with.
	cfg, err := env.UserConfig("controller")
	if err != nil {
		t.Fatal(err)
	}
	asController, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d = h.get(t, "other")
	if _, err := asController.AppsV1().Deployments(h.ns).Update(t.Context(), d, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("controller user's Update: %v, want Forbidden", err)
	}
}

func TestIdempotent(t *testing.T) {
	h := start(t, "idempotent", envoyV1)
	h.create(t, deployment(h.ns, "web", true, "app"))
	h.waitSidecar(t, "web", withEnvoy, dataAndConf, "envoyproxy/envoy:v1")
	h.settle(t, 0) // and the reconcile of the controller's own patch
	if got := h.patches.of("web"); got != 1 {
		t.Fatalf("%d patches for one injection", got)
	}

	// Changes that each make the controller look again, but call for no patch: an
	// unrelated annotation, a change of the user's container (generation), the same
	// definition reformatted, and a ConfigMap change that is not the definition.
	n := h.reconciles.n.Load()
	h.update(t, "web", func(d *appsv1.Deployment) { d.Annotations["note"] = "hello" })
	h.settle(t, n)
	n = h.reconciles.n.Load()
	h.update(t, "web", func(d *appsv1.Deployment) { container(d, "app").Image = "app:2" })
	h.settle(t, n)
	reformatted := "# reformatted\n" + strings.ReplaceAll(envoyV1, `args: ["--config-path", "/etc/envoy/envoy.json"]`,
		"args:\n      - --config-path\n      - /etc/envoy/envoy.json")
	if reformatted == "# reformatted\n"+envoyV1 || hashOf(t, reformatted) != hashOf(t, envoyV1) {
		t.Fatalf("reformatting is not a valid, equivalent definition:\n%s", reformatted)
	}
	n = h.reconciles.n.Load()
	cm := h.setConfig(t, reformatted)
	h.settle(t, n)
	n = h.reconciles.n.Load()
	cm.Labels = map[string]string{"touched": "yes"}
	if _, err := h.admin.CoreV1().ConfigMaps(cmNamespace).Update(t.Context(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := h.get(t, "web").ResourceVersion
	h.settle(t, n)

	if got := h.patches.of("web"); got != 1 {
		t.Errorf("%d patches, want still 1", got)
	}
	d := h.get(t, "web")
	if d.ResourceVersion != want {
		t.Errorf("resourceVersion %s, want %s: something wrote to the Deployment", d.ResourceVersion, want)
	}
	if container(d, "app").Image != "app:2" {
		t.Errorf("user's image change lost: %+v", container(d, "app"))
	}
}

func TestRemovesOnOptOut(t *testing.T) {
	h := start(t, "optout", envoyV1)
	h.create(t, deployment(h.ns, "web", true, "app", "log"))
	h.waitSidecar(t, "web", []string{"app", "log", "envoy"}, dataAndConf, "envoyproxy/envoy:v1")

	// The user changes their own container and opts out in one update.
	h.update(t, "web", func(d *appsv1.Deployment) {
		container(d, "app").Image = "app:2"
		delete(d.Annotations, injector.InjectAnnotation)
	})
	d := h.waitSidecar(t, "web", []string{"app", "log"}, []string{"data"}, "")
	if container(d, "app").Image != "app:2" || container(d, "log").Image != "log:1" {
		t.Errorf("user containers changed: %+v", d.Spec.Template.Spec.Containers)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].Name != "data" {
			t.Errorf("container %s mounts %+v", c.Name, c.VolumeMounts)
		}
	}
	if _, ok := d.Annotations[injector.RecordAnnotation]; ok || d.Annotations["owner"] != "team-a" {
		t.Errorf("annotations %v", d.Annotations)
	}
	h.waitEvent(t, "web", injector.ReasonRemoved)
	n := h.reconciles.n.Load()
	h.settle(t, n-1)
	if got := h.patches.of("web"); got != 2 {
		t.Errorf("%d patches, want 2 (inject, remove)", got)
	}
}

func TestConfigChangeRepatchesEveryOptedInDeployment(t *testing.T) {
	h := start(t, "rollout", envoyV1)
	const opted, plain = 5, 2
	for i := range opted {
		h.create(t, deployment(h.ns, fmt.Sprintf("app-%d", i), true, "app"))
	}
	plainRV := map[string]string{}
	for i := range plain {
		d := h.create(t, deployment(h.ns, fmt.Sprintf("plain-%d", i), false, "app"))
		plainRV[d.Name] = d.ResourceVersion
	}
	for i := range opted {
		h.waitSidecar(t, fmt.Sprintf("app-%d", i), withEnvoy, dataAndConf, "envoyproxy/envoy:v1")
	}
	// Users change their own parts of two of them meanwhile.
	h.update(t, "app-0", func(d *appsv1.Deployment) { container(d, "app").Image = "app:2" })
	h.update(t, "app-1", func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{Name: "extra", Image: "extra:1"})
	})

	h.setConfig(t, envoyV2)
	hash := hashOf(t, envoyV2)
	for i := range opted {
		name := fmt.Sprintf("app-%d", i)
		want := withEnvoy
		if i == 1 {
			want = []string{"app", "extra", "envoy"}
		}
		d := h.waitSidecar(t, name, want, dataAndV2, "envoyproxy/envoy:v2")
		if rec, _ := injector.ReadRecord(d); rec.Hash != hash {
			t.Errorf("%s: record %+v, want hash %s", name, rec, hash)
		}
		if envoy := container(d, "envoy"); len(envoy.Args) != 0 || envoy.VolumeMounts[0].Name != "envoy-conf-v2" {
			t.Errorf("%s: envoy not replaced by v2: %+v", name, envoy)
		}
		wantImage := "app:1"
		if i == 0 {
			wantImage = "app:2"
		}
		if got := container(d, "app").Image; got != wantImage {
			t.Errorf("%s: user image %s, want %s", name, got, wantImage)
		}
	}
	h.waitEvent(t, "app-4", injector.ReasonReinjected)
	h.settle(t, h.reconciles.n.Load()-1)
	if got := h.patches.total(); got != 2*opted {
		t.Errorf("%d patches, want %d (one injection and one re-injection each)", got, 2*opted)
	}
	for name, rv := range plainRV {
		if got := h.get(t, name).ResourceVersion; got != rv || h.patches.of(name) != 0 {
			t.Errorf("%s, not opted in, was written: resourceVersion %s → %s", name, rv, got)
		}
	}
}

func TestBadConfigIsReportedAndLeavesDeploymentsAlone(t *testing.T) {
	h := start(t, "badconfig", envoyV1)
	h.create(t, deployment(h.ns, "web", true, "app"))
	injected := h.waitSidecar(t, "web", withEnvoy, dataAndConf, "envoyproxy/envoy:v1")

	// A definition that does not parse: nothing is touched, each opted-in Deployment
	// gets a Warning Event saying why.
	h.setConfig(t, "containers: [")
	ev := h.waitEvent(t, "web", injector.ReasonConfigInvalid)
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "invalid sidecar definition in ConfigMap "+cmNamespace+"/"+cmName) {
		t.Errorf("event %s %q", ev.Type, ev.Message)
	}
	// Created only once the controller has seen the bad definition (web's Event says
	// so): the Deployment and ConfigMap watches are separate streams, and a Deployment
	// created right after the update may reach the controller first.
	h.create(t, deployment(h.ns, "new", true, "app"))
	h.waitEvent(t, "new", injector.ReasonConfigInvalid)
	// A misspelt field is as bad: it must not inject an empty sidecar.
	h.setConfig(t, strings.Replace(envoyV1, "containers:", "contaners:", 1))
	h.waitEventSaying(t, "web", injector.ReasonConfigInvalid, `unknown field "contaners"`)
	h.settle(t, h.reconciles.n.Load()-1)
	if got := h.get(t, "web"); got.ResourceVersion != injected.ResourceVersion {
		t.Errorf("web changed under a bad definition: %v", containerNames(got))
	}
	if got := containerNames(h.get(t, "new")); !slices.Equal(got, []string{"app"}) {
		t.Errorf("new changed under a bad definition: %v", got)
	}

	// A clash with a user's container: that Deployment is left alone, others proceed.
	h.create(t, deployment(h.ns, "clash", true, "app", "envoy"))
	h.setConfig(t, envoyV2)
	h.waitSidecar(t, "web", withEnvoy, dataAndV2, "envoyproxy/envoy:v2")
	h.waitSidecar(t, "new", withEnvoy, dataAndV2, "envoyproxy/envoy:v2")
	ev = h.waitEvent(t, "clash", injector.ReasonConflict)
	if !strings.Contains(ev.Message, `already has a container named "envoy"`) {
		t.Errorf("conflict event %q", ev.Message)
	}
	clash := h.get(t, "clash")
	if container(clash, "envoy").Image != "envoy:1" || !slices.Equal(volumeNames(clash), []string{"data"}) || clash.Annotations[injector.RecordAnnotation] != "" {
		t.Errorf("clashing Deployment changed: %v %v %v", containerNames(clash), volumeNames(clash), clash.Annotations)
	}
	if h.patches.of("clash") != 0 {
		t.Errorf("clashing Deployment patched %d times", h.patches.of("clash"))
	}

	// The ConfigMap deleted: Deployments keep their sidecar, a newcomer is told.
	h.deleteConfig(t)
	h.waitEvent(t, "web", injector.ReasonConfigMissing) // seen by the controller: see "new"
	h.create(t, deployment(h.ns, "late", true, "app"))
	h.waitEvent(t, "late", injector.ReasonConfigMissing)
	if got := containerNames(h.get(t, "late")); !slices.Equal(got, []string{"app"}) {
		t.Errorf("late changed without a definition: %v", got)
	}
	h.waitSidecar(t, "web", withEnvoy, dataAndV2, "envoyproxy/envoy:v2")

	// Re-created: every opted-in Deployment, the newcomer included, follows it.
	h.setConfig(t, envoyV1)
	for _, name := range []string{"web", "new", "late"} {
		h.waitSidecar(t, name, withEnvoy, dataAndConf, "envoyproxy/envoy:v1")
	}
}

func TestUserChangesArePreserved(t *testing.T) {
	h := start(t, "userchanges", envoyV1)
	original := deployment(h.ns, "web", true, "app")
	h.create(t, original.DeepCopy())
	h.waitSidecar(t, "web", withEnvoy, dataAndConf, "envoyproxy/envoy:v1")

	// The user edits their container and adds a volume.
	h.update(t, "web", func(d *appsv1.Deployment) {
		app := container(d, "app")
		app.Image = "app:2"
		app.Env = []corev1.EnvVar{{Name: "MODE", Value: "debug"}}
		d.Spec.Template.Spec.Volumes = append(d.Spec.Template.Spec.Volumes, corev1.Volume{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	})
	// Then writes back their own manifest's pod template (as a blind update would),
	// which drops the sidecar: the controller puts it back, keeping the user's image.
	h.update(t, "web", func(d *appsv1.Deployment) {
		tmpl := original.Spec.Template.DeepCopy()
		tmpl.Spec.Containers[0].Image = "app:3"
		tmpl.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "MODE", Value: "debug"}}
		d.Spec.Template = *tmpl
	})
	d := h.waitSidecar(t, "web", withEnvoy, dataAndConf, "envoyproxy/envoy:v1")
	h.waitEvent(t, "web", injector.ReasonReinjected)
	if app := container(d, "app"); app.Image != "app:3" || len(app.Env) != 1 || app.Env[0].Value != "debug" {
		t.Errorf("user container after repair: %+v", app)
	}

	// A hand edit of the sidecar itself is undone, the user's container kept.
	h.update(t, "web", func(d *appsv1.Deployment) { container(d, "envoy").Image = "envoyproxy/envoy:hacked" })
	d = h.waitSidecar(t, "web", withEnvoy, dataAndConf, "envoyproxy/envoy:v1")
	if app := container(d, "app"); app.Image != "app:3" {
		t.Errorf("user container after restoring the sidecar: %+v", app)
	}

	// A new definition keeps the user's container as they left it.
	h.setConfig(t, envoyV2)
	d = h.waitSidecar(t, "web", withEnvoy, dataAndV2, "envoyproxy/envoy:v2")
	if app := container(d, "app"); app.Image != "app:3" || len(app.Env) != 1 || app.Env[0].Value != "debug" {
		t.Errorf("user container after a new definition: %+v", app)
	}
}
