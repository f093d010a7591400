package testenv

import (
	"context"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// InstallCRD creates crd (or leaves an identical existing one alone) and waits until the
// API server serves its storage version: the CRD is Established and a LIST of the new
// resource succeeds, so objects can be created at once. It gives up when ctx ends or
// after the start timeout.
func (e *Env) InstallCRD(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
	if crd == nil {
		return fmt.Errorf("testenv: InstallCRD: nil CRD")
	}
	var version string
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			version = v.Name
		}
	}
	if version == "" {
		return fmt.Errorf("testenv: InstallCRD %s: no storage version", crd.Name)
	}
	cfg := e.Config()
	ext, err := apiextensions.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("testenv: InstallCRD %s: %w", crd.Name, err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("testenv: InstallCRD %s: %w", crd.Name, err)
	}
	crds := ext.ApiextensionsV1().CustomResourceDefinitions()
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("testenv: InstallCRD %s: %w", crd.Name, err)
	}
	gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: version, Resource: crd.Spec.Names.Plural}
	ctx, cancel := e.readyContext(ctx)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		got, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
		if err == nil && established(got) {
			if _, err = dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1}); err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testenv: CRD %s not served: %w (last error: %v)", crd.Name, context.Cause(ctx), err)
		case <-tick.C:
		}
	}
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}
