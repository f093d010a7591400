package main

import (
	"context"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/examples/network-controller/network"
	"github.com/ctrlkit/ctrlkit/examples/replicaset/podset"
)

// crdCreateHold is how long kube-apiserver holds every create of a custom resource after
// its CustomResourceDefinition became Established: its CRD handler sleeps that long before
// it handles the create, so that the other API servers of a cluster have seen the CRD
// before a follow-up request reaches them. A create sent in that window takes two seconds
// longer, all of it before the server stores anything; nothing the controllers do
// changes it. The server compares with the condition's lastTransitionTime, which it keeps
// to the second.
const crdCreateHold = 2 * time.Second

// demoCRDs are the resources of the demo's CustomResourceDefinitions.
var demoCRDs = []schema.GroupResource{network.GroupVersionResource.GroupResource(), podset.GroupVersionResource.GroupResource()}

// waitCRDCreateHold waits until kube-apiserver no longer holds creates of the demo's
// custom resources (see crdCreateHold), so that the first writes of the workload measure
// the controllers and not that hold. It returns how long it waited.
func waitCRDCreateHold(ctx context.Context, c *clients) (time.Duration, error) {
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, gr := range demoCRDs {
		crd, err := c.ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, gr.String(), metav1.GetOptions{})
		if err != nil {
			return 0, err
		}
		crds = append(crds, crd)
	}
	d := time.Until(createHoldEnd(crds))
	if d <= 0 {
		return 0, nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-t.C:
		return d, nil
	}
}

// createHoldEnd returns when kube-apiserver stops holding creates of every one of crds:
// crdCreateHold after the latest time one of them became Established. It returns the zero
// time if none is Established.
func createHoldEnd(crds []*apiextensionsv1.CustomResourceDefinition) time.Time {
	var end time.Time
	for _, crd := range crds {
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				if e := c.LastTransitionTime.Add(crdCreateHold); e.After(end) {
					end = e
				}
			}
		}
	}
	return end
}
