package foo

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leakcheck.Options()...) }

// A Foo decodes from the JSON the API server sends, with no generated code.
func TestFooDecodesFromServerJSON(t *testing.T) {
	const wire = `{"apiVersion":"samplecontroller.k8s.io/v1alpha1","kind":"Foo",
		"metadata":{"name":"example-foo","namespace":"default","uid":"u1","resourceVersion":"7"},
		"spec":{"deploymentName":"example-foo","replicas":3},
		"status":{"availableReplicas":2}}`
	var f Foo
	if err := json.Unmarshal([]byte(wire), &f); err != nil {
		t.Fatal(err)
	}
	if f.GroupVersionKind() != GroupVersionKind {
		t.Errorf("kind = %v, want %v", f.GroupVersionKind(), GroupVersionKind)
	}
	if f.Namespace != "default" || f.Name != "example-foo" || f.UID != "u1" || f.ResourceVersion != "7" {
		t.Errorf("metadata = %+v", f.ObjectMeta)
	}
	if f.Spec.DeploymentName != "example-foo" || f.Spec.Replicas == nil || *f.Spec.Replicas != 3 {
		t.Errorf("spec = %+v", f.Spec)
	}
	if f.Status.AvailableReplicas != 2 {
		t.Errorf("status = %+v", f.Status)
	}
}

// DeepCopy shares no memory with the original: changing the copy's metadata
// and replicas leaves the original as it was.
func TestDeepCopyIsIndependent(t *testing.T) {
	orig := newFoo("a", "d", 2)
	orig.Labels = map[string]string{"k": "v"}
	before := orig.DeepCopy()
	c := orig.DeepCopyObject().(*Foo)
	c.Labels["k"] = "changed"
	*c.Spec.Replicas = 9
	c.Status.AvailableReplicas = 5
	if diff := cmp.Diff(before, orig); diff != "" {
		t.Errorf("original changed through its copy (-before +after):\n%s", diff)
	}
	if (*Foo)(nil).DeepCopy() != nil {
		t.Error("DeepCopy of nil is not nil")
	}
}

// The CRD serves Foo at the names the controller uses, with the status
// subresource (the status patch needs it) and upstream's bounds on replicas.
func TestCRD(t *testing.T) {
	crd := CRD()
	if crd.Name != "foos.samplecontroller.k8s.io" || crd.Spec.Group != Group || crd.Spec.Names.Kind != Kind || crd.Spec.Names.Plural != Resource {
		t.Errorf("names: %s, %+v", crd.Name, crd.Spec.Names)
	}
	if crd.Spec.Scope != apiextensionsv1.NamespaceScoped {
		t.Errorf("scope = %s", crd.Spec.Scope)
	}
	if len(crd.Spec.Versions) != 1 {
		t.Fatalf("%d versions, want 1", len(crd.Spec.Versions))
	}
	v := crd.Spec.Versions[0]
	if v.Name != Version || !v.Served || !v.Storage {
		t.Errorf("version %+v", v)
	}
	if v.Subresources == nil || v.Subresources.Status == nil {
		t.Error("no status subresource")
	}
	r := v.Schema.OpenAPIV3Schema.Properties["spec"].Properties["replicas"]
	if r.Minimum == nil || *r.Minimum != 1 || r.Maximum == nil || *r.Maximum != 10 {
		t.Errorf("replicas bounds: %+v", r)
	}
	if _, ok := v.Schema.OpenAPIV3Schema.Properties["status"].Properties["availableReplicas"]; !ok {
		t.Error("no status.availableReplicas in the schema")
	}
	if crd.Annotations["api-approved.kubernetes.io"] == "" {
		t.Error("a k8s.io group without the api-approved.kubernetes.io annotation")
	}
}
