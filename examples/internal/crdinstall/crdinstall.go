// Package crdinstall creates an example's CustomResourceDefinition through the
// apiextensions API and waits until the API server serves its resource, so each example's
// Install is one call.
package crdinstall

import (
	"context"
	"errors"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// pollInterval is how often Install checks whether the resource is served.
const pollInterval = 100 * time.Millisecond

// Install creates crd, or leaves an existing CRD of that name as it is, and returns once it
// is Established and a LIST of gvr succeeds (Established can come before every handler of
// the server serves the resource). A CRD whose names the server refused fails at once. It
// gives up after timeout or when ctx ends, with the last reason it was not served.
func Install(ctx context.Context, cfg *rest.Config, crd *apiextensionsv1.CustomResourceDefinition, gvr schema.GroupVersionResource, timeout time.Duration) error {
	if cfg == nil {
		return errors.New("nil rest.Config")
	}
	ext, err := apiextensions.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	crds := ext.ApiextensionsV1().CustomResourceDefinitions()
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating CRD %s: %w", crd.Name, err)
	}
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		got, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
		if err == nil {
			err = servedErr(got)
			var refused *namesRefused
			if errors.As(err, &refused) {
				return err
			}
		}
		if err == nil {
			_, err = dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not served: %w (last error: %v)", gvr.GroupResource(), context.Cause(ctx), err)
		case <-tick.C:
		}
	}
}

type namesRefused struct{ msg string }

func (e *namesRefused) Error() string { return "CRD names not accepted: " + e.msg }

// servedErr says why crd's resource is not served yet, from its conditions; nil once it
// is Established.
func servedErr(crd *apiextensionsv1.CustomResourceDefinition) error {
	established := false
	for _, c := range crd.Status.Conditions {
		switch {
		case c.Type == apiextensionsv1.NamesAccepted && c.Status == apiextensionsv1.ConditionFalse:
			return &namesRefused{c.Message}
		case c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue:
			established = true
		}
	}
	if !established {
		return fmt.Errorf("CRD %s not established yet", crd.Name)
	}
	return nil
}
