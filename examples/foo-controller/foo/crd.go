package foo

import (
	"context"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/ctrlkit/ctrlkit/examples/internal/crdinstall"
)

// installTimeout bounds Install's wait for the API server to serve Foos.
const installTimeout = time.Minute

// CRD returns the CustomResourceDefinition of Foo: namespaced, v1alpha1, with the
// status subresource, and spec.replicas between 1 and 10 as upstream's. A group
// under k8s.io needs the api-approved.kubernetes.io annotation; this one says it
// is not approved, as upstream's does.
func CRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{
			Name:        Resource + "." + Group,
			Annotations: map[string]string{"api-approved.kubernetes.io": "unapproved, an example of a controller, not an API"},
		},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: Group,
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: Resource, Singular: "foo", Kind: Kind, ListKind: Kind + "List"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"deploymentName": {Type: "string"},
							"replicas":       {Type: "integer", Format: "int32", Minimum: ptr.To(1.0), Maximum: ptr.To(10.0)},
						}},
						"status": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"availableReplicas": {Type: "integer", Format: "int32"},
						}},
					},
				}},
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
			}},
		},
	}
}

// Install creates the Foo CRD (see CRD) and waits until Foos can be listed, for
// at most a minute (less if ctx ends first). An existing CRD of that name is kept
// as it is.
func Install(ctx context.Context, cfg *rest.Config) error {
	if err := crdinstall.Install(ctx, cfg, CRD(), GroupVersionResource, installTimeout); err != nil {
		return fmt.Errorf("foo: install: %w", err)
	}
	return nil
}
