package foo_test

import (
	"encoding/json"
	"fmt"

	"github.com/ctrlkit/ctrlkit/examples/foo-controller/foo"
)

// A Foo is a plain Go struct: the server's JSON decodes into it as it is, which
// is all manager.Custom needs to keep a typed cache of Foos.
func Example() {
	const wire = `{"apiVersion":"samplecontroller.k8s.io/v1alpha1","kind":"Foo",
		"metadata":{"name":"example-foo","namespace":"default"},
		"spec":{"deploymentName":"example-foo","replicas":1}}`
	var f foo.Foo
	if err := json.Unmarshal([]byte(wire), &f); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(f.GroupVersionKind(), f.Namespace+"/"+f.Name, "wants", *f.Spec.Replicas, "Pod(s) in Deployment", f.Spec.DeploymentName)
	fmt.Println("served by the CRD", foo.CRD().Name)
	// Output:
	// samplecontroller.k8s.io/v1alpha1, Kind=Foo default/example-foo wants 1 Pod(s) in Deployment example-foo
	// served by the CRD foos.samplecontroller.k8s.io
}
