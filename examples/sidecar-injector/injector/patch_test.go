package injector

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const envoyV1 = `
containers:
  - name: envoy
    image: envoyproxy/envoy:v1
    args: ["--config-path", "/etc/envoy/envoy.json"]
    volumeMounts:
      - name: envoy-conf
        mountPath: /etc/envoy
volumes:
  - name: envoy-conf
    configMap:
      name: envoy
`

// envoyV2 changes the image and renames the volume.
const envoyV2 = `
containers:
  - name: envoy
    image: envoyproxy/envoy:v2
    volumeMounts:
      - name: envoy-conf-2
        mountPath: /etc/envoy
volumes:
  - name: envoy-conf-2
    configMap:
      name: envoy-2
`

func mustParse(t *testing.T, data string) *Sidecar {
	t.Helper()
	sc, err := ParseSidecar("test", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// userDeployment has a user container and volume, and opts in if inject.
func userDeployment(inject bool) *appsv1.Deployment {
	d := &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "web", ResourceVersion: "42",
			Annotations: map[string]string{"team": "a"},
		},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "app", Image: "nginx:1", Env: []corev1.EnvVar{{Name: "MODE", Value: "prod"}},
						VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
					}},
					Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				},
			},
		},
	}
	if inject {
		d.Annotations[InjectAnnotation] = "true"
	}
	return d
}

// apply applies plan to d the way the API server does (strategic merge), checks the
// resourceVersion precondition, and returns the result with a new resourceVersion.
func apply(t *testing.T, d *appsv1.Deployment, plan Plan) *appsv1.Deployment {
	t.Helper()
	var pre struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(plan.Patch, &pre); err != nil {
		t.Fatal(err)
	}
	if pre.Metadata.ResourceVersion != d.ResourceVersion {
		t.Fatalf("patch precondition resourceVersion %q, object has %q", pre.Metadata.ResourceVersion, d.ResourceVersion)
	}
	orig, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	out, err := strategicpatch.StrategicMergePatch(orig, plan.Patch, appsv1.Deployment{})
	if err != nil {
		t.Fatalf("applying %s: %v", plan.Patch, err)
	}
	var got appsv1.Deployment
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	got.ResourceVersion = d.ResourceVersion + "1"
	return &got
}

func compute(t *testing.T, d *appsv1.Deployment, sc *Sidecar, want Action) Plan {
	t.Helper()
	plan, err := ComputePatch(d, sc)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Action != want {
		t.Fatalf("action %v, want %v; patch %s", plan.Action, want, plan.Patch)
	}
	if (plan.Patch == nil) != (want == NoAction) {
		t.Fatalf("action %v with patch %q", plan.Action, plan.Patch)
	}
	return plan
}

func names[T any](items []T, name func(T) string) []string {
	var out []string
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

// defaultContainers mimics the API server's defaulting of the containers of d.
func defaultContainers(d *appsv1.Deployment) {
	for i := range d.Spec.Template.Spec.Containers {
		c := &d.Spec.Template.Spec.Containers[i]
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
		c.ImagePullPolicy = corev1.PullIfNotPresent
	}
}

func TestComputePatchInjects(t *testing.T) {
	sc := mustParse(t, envoyV1)
	d := userDeployment(true)
	plan := compute(t, d, sc, Inject)
	if strings.Contains(string(plan.Patch), "nginx") {
		t.Errorf("patch rewrites the user's container: %s", plan.Patch)
	}
	got := apply(t, d, plan)
	if diff := cmp.Diff([]string{"app", "envoy"}, containerNames(got)); diff != "" {
		t.Errorf("containers (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"data", "envoy-conf"}, volumeNames(got)); diff != "" {
		t.Errorf("volumes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(sc.Containers[0], got.Spec.Template.Spec.Containers[1]); diff != "" {
		t.Errorf("injected container (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(d.Spec.Template.Spec.Containers[0], got.Spec.Template.Spec.Containers[0]); diff != "" {
		t.Errorf("user container changed (-want +got):\n%s", diff)
	}
	rec, err := ReadRecord(got)
	if err != nil || rec == nil {
		t.Fatalf("record %v, %v", rec, err)
	}
	if diff := cmp.Diff(&Record{Hash: sc.Hash(), Containers: []string{"envoy"}, Volumes: []string{"envoy-conf"}}, rec); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}
	if got.Annotations["team"] != "a" || got.Annotations[InjectAnnotation] != "true" {
		t.Errorf("other annotations lost: %v", got.Annotations)
	}
}

func TestComputePatchIsIdempotent(t *testing.T) {
	sc := mustParse(t, envoyV1)
	d := apply(t, userDeployment(true), compute(t, userDeployment(true), sc, Inject))
	compute(t, d, sc, NoAction)

	// The API server's defaults in the injected container are not fought over.
	defaultContainers(d)
	compute(t, d, sc, NoAction)

	// Nor are the user's changes to their own containers and volumes.
	spec := &d.Spec.Template.Spec
	spec.Containers[0].Image = "nginx:2"
	spec.Containers = append([]corev1.Container{{Name: "log", Image: "busybox"}}, spec.Containers...)
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "cache"})
	compute(t, d, sc, NoAction)

	// The same definition reformatted has the same hash.
	again := mustParse(t, "# same, reformatted\n"+strings.ReplaceAll(envoyV1, `args: ["--config-path", "/etc/envoy/envoy.json"]`, "args:\n      - --config-path\n      - /etc/envoy/envoy.json"))
	if again.Hash() != sc.Hash() {
		t.Fatalf("reformatting changed the hash: %s != %s", again.Hash(), sc.Hash())
	}
	compute(t, d, again, NoAction)
}

func TestComputePatchRemovesExactlyTheSidecar(t *testing.T) {
	sc := mustParse(t, envoyV1)
	d := apply(t, userDeployment(true), compute(t, userDeployment(true), sc, Inject))
	defaultContainers(d)
	// The user changes their container, adds one and a volume, then opts out.
	spec := &d.Spec.Template.Spec
	spec.Containers[0].Image = "nginx:2"
	spec.Containers = append(spec.Containers, corev1.Container{Name: "log", Image: "busybox"})
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "cache"})
	delete(d.Annotations, InjectAnnotation)
	userSpec := d.Spec.Template.Spec.DeepCopy()

	plan := compute(t, d, nil, Remove) // removal needs no definition
	got := apply(t, d, plan)
	if diff := cmp.Diff([]string{"app", "log"}, containerNames(got)); diff != "" {
		t.Errorf("containers (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"data", "cache"}, volumeNames(got)); diff != "" {
		t.Errorf("volumes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(userSpec.Containers[0], got.Spec.Template.Spec.Containers[0]); diff != "" {
		t.Errorf("user container changed (-want +got):\n%s", diff)
	}
	if _, ok := got.Annotations[RecordAnnotation]; ok {
		t.Errorf("record left: %v", got.Annotations)
	}
	compute(t, got, nil, NoAction)
	compute(t, got, sc, NoAction) // a definition changes nothing for a Deployment that opted out
}

func TestComputePatchReinjectsChangedDefinition(t *testing.T) {
	v1, v2 := mustParse(t, envoyV1), mustParse(t, envoyV2)
	if v1.Hash() == v2.Hash() {
		t.Fatal("different definitions have the same hash")
	}
	d := apply(t, userDeployment(true), compute(t, userDeployment(true), v1, Inject))
	defaultContainers(d)
	d.Spec.Template.Spec.Containers[0].Image = "nginx:3"
	user := *d.Spec.Template.Spec.Containers[0].DeepCopy()

	got := apply(t, d, compute(t, d, v2, Reinject))
	if diff := cmp.Diff([]string{"app", "envoy"}, containerNames(got)); diff != "" {
		t.Errorf("containers (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"data", "envoy-conf-2"}, volumeNames(got)); diff != "" {
		t.Errorf("volumes (-want +got):\n%s", diff)
	}
	envoy := got.Spec.Template.Spec.Containers[1]
	if envoy.Image != "envoyproxy/envoy:v2" || len(envoy.Args) != 0 || envoy.VolumeMounts[0].Name != "envoy-conf-2" {
		t.Errorf("envoy not replaced by v2: %+v", envoy)
	}
	if diff := cmp.Diff(user, got.Spec.Template.Spec.Containers[0]); diff != "" {
		t.Errorf("user container changed (-want +got):\n%s", diff)
	}
	if rec, _ := ReadRecord(got); rec == nil || rec.Hash != v2.Hash() {
		t.Errorf("record %+v, want hash %s", rec, v2.Hash())
	}
	compute(t, got, v2, NoAction)
}

func TestComputePatchRepairsRemovedSidecar(t *testing.T) {
	sc := mustParse(t, envoyV1)
	d := apply(t, userDeployment(true), compute(t, userDeployment(true), sc, Inject))
	d.Spec.Template.Spec.Volumes = d.Spec.Template.Spec.Volumes[:1] // someone removed envoy-conf
	got := apply(t, d, compute(t, d, sc, Reinject))
	if diff := cmp.Diff([]string{"data", "envoy-conf"}, volumeNames(got)); diff != "" {
		t.Errorf("volumes (-want +got):\n%s", diff)
	}
	compute(t, got, sc, NoAction)
}

func TestComputePatchConflicts(t *testing.T) {
	sc := mustParse(t, envoyV1)
	for _, tc := range []struct {
		name   string
		change func(*corev1.PodSpec)
		kind   string
	}{
		{"container", func(s *corev1.PodSpec) {
			s.Containers = append(s.Containers, corev1.Container{Name: "envoy", Image: "mine"})
		}, "container"},
		{"init container", func(s *corev1.PodSpec) { s.InitContainers = []corev1.Container{{Name: "envoy", Image: "mine"}} }, "container"},
		{"ephemeral container", func(s *corev1.PodSpec) {
			s.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "envoy"}}}
		}, "container"},
		{"volume", func(s *corev1.PodSpec) { s.Volumes = append(s.Volumes, corev1.Volume{Name: "envoy-conf"}) }, "volume"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := userDeployment(true)
			tc.change(&d.Spec.Template.Spec)
			before := d.DeepCopy()
			plan, err := ComputePatch(d, sc)
			var ce *ConflictError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v, want a *ConflictError", err)
			}
			if ce.Kind != tc.kind || ce.Deployment != "ns/web" {
				t.Errorf("conflict %+v", ce)
			}
			if !strings.HasPrefix(err.Error(), "injector: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
			if plan.Action != NoAction || plan.Patch != nil {
				t.Errorf("plan %+v with an error", plan)
			}
			if diff := cmp.Diff(before, d); diff != "" {
				t.Errorf("input modified (-before +after):\n%s", diff)
			}
		})
	}
}

func TestComputePatchConflictOnReinject(t *testing.T) {
	// v2 adds a container whose name the user took meanwhile: the old sidecar stays.
	v1 := mustParse(t, envoyV1)
	v2 := mustParse(t, strings.Replace(envoyV1, "volumes:", "  - name: stats\n    image: stats:1\nvolumes:", 1))
	if diff := cmp.Diff([]string{"envoy", "stats"}, v2.containerNames()); diff != "" {
		t.Fatalf("v2 containers (-want +got):\n%s", diff)
	}
	d := apply(t, userDeployment(true), compute(t, userDeployment(true), v1, Inject))
	d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{Name: "stats", Image: "mine"})
	if _, err := ComputePatch(d, v2); !errors.As(err, new(*ConflictError)) {
		t.Fatalf("error %v, want a *ConflictError", err)
	}
}

func TestComputePatchNotOptedIn(t *testing.T) {
	sc := mustParse(t, envoyV1)
	for _, value := range []string{"", "false", "yes", "True"} {
		d := userDeployment(false)
		if value != "" {
			d.Annotations[InjectAnnotation] = value
		}
		if OptedIn(d) {
			t.Errorf("%q opts in", value)
		}
		compute(t, d, sc, NoAction)
	}
}

func TestComputePatchErrors(t *testing.T) {
	d := userDeployment(true)
	if _, err := ComputePatch(d, nil); !errors.Is(err, ErrNoSidecar) {
		t.Errorf("nil sidecar: error %v, want ErrNoSidecar", err)
	}
	sc := mustParse(t, envoyV1)
	for _, bad := range []string{"{", `{"hash":""}`, `{"hash":"x","containers":[]}`, `[]`} {
		d := userDeployment(true)
		d.Annotations[RecordAnnotation] = bad
		plan, err := ComputePatch(d, sc)
		if !errors.Is(err, ErrInvalidRecord) {
			t.Errorf("record %q: error %v, want ErrInvalidRecord", bad, err)
		}
		if plan.Patch != nil {
			t.Errorf("record %q: patch %s with an error", bad, plan.Patch)
		}
		delete(d.Annotations, InjectAnnotation) // opting out needs the record too
		if _, err := ComputePatch(d, nil); !errors.Is(err, ErrInvalidRecord) {
			t.Errorf("record %q, opted out: error %v, want ErrInvalidRecord", bad, err)
		}
	}
}

func TestComputePatchDoesNotModifyInput(t *testing.T) {
	sc := mustParse(t, envoyV1)
	scBefore := mustParse(t, envoyV1)
	d := userDeployment(true)
	before := d.DeepCopy()
	injected := apply(t, d, compute(t, d, sc, Inject))
	if diff := cmp.Diff(before, d); diff != "" {
		t.Errorf("inject modified its input (-before +after):\n%s", diff)
	}
	delete(injected.Annotations, InjectAnnotation)
	before = injected.DeepCopy()
	compute(t, injected, nil, Remove)
	if diff := cmp.Diff(before, injected); diff != "" {
		t.Errorf("remove modified its input (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(scBefore.Containers, sc.Containers); diff != "" {
		t.Errorf("sidecar modified (-before +after):\n%s", diff)
	}
}

func TestComputePatchWithoutResourceVersion(t *testing.T) {
	d := userDeployment(true)
	d.ResourceVersion = ""
	plan := compute(t, d, mustParse(t, envoyV1), Inject)
	if strings.Contains(string(plan.Patch), "resourceVersion") {
		t.Errorf("patch has a precondition though the object has no resourceVersion: %s", plan.Patch)
	}
}

func TestActionString(t *testing.T) {
	for a, want := range map[Action]string{NoAction: "none", Inject: "inject", Reinject: "reinject", Remove: "remove", 9: "Action(9)", -1: "Action(-1)"} {
		if got := a.String(); got != want {
			t.Errorf("Action(%d).String() = %q, want %q", int(a), got, want)
		}
	}
}

func TestComputePatchRestoresEditedSidecar(t *testing.T) {
	sc := mustParse(t, envoyV1)
	injected := apply(t, userDeployment(true), compute(t, userDeployment(true), sc, Inject))
	defaultContainers(injected)
	for _, tc := range []struct {
		name string
		edit func(*corev1.PodSpec)
	}{
		{"image", func(s *corev1.PodSpec) { s.Containers[1].Image = "envoyproxy/envoy:hacked" }},
		{"args", func(s *corev1.PodSpec) { s.Containers[1].Args = nil }},
		{"mount", func(s *corev1.PodSpec) { s.Containers[1].VolumeMounts[0].MountPath = "/tmp" }},
		{"volume source", func(s *corev1.PodSpec) { s.Volumes[1].ConfigMap.Name = "other" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := injected.DeepCopy()
			tc.edit(&d.Spec.Template.Spec)
			got := apply(t, d, compute(t, d, sc, Reinject))
			if diff := cmp.Diff(sc.Containers[0], got.Spec.Template.Spec.Containers[1]); diff != "" {
				t.Errorf("envoy not restored (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(sc.Volumes[0], got.Spec.Template.Spec.Volumes[1]); diff != "" {
				t.Errorf("volume not restored (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(injected.Spec.Template.Spec.Containers[0], got.Spec.Template.Spec.Containers[0]); diff != "" {
				t.Errorf("user container changed (-want +got):\n%s", diff)
			}
			compute(t, got, sc, NoAction)
		})
	}
	// A field the definition does not set, added by hand, is not an edit to undo.
	d := injected.DeepCopy()
	d.Spec.Template.Spec.Containers[1].Env = []corev1.EnvVar{{Name: "LOG", Value: "debug"}}
	compute(t, d, sc, NoAction)
}
