package network

import (
	"context"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/examples/internal/crdinstall"
)

// InstallTimeout bounds Install when its context has no earlier deadline.
const InstallTimeout = 2 * time.Minute

// CRD returns the CustomResourceDefinition of Network: namespaced, version v1 served
// and stored, with the status subresource and a structural schema (unknown fields are
// pruned, so a typed read-modify-write through Network loses nothing).
//
// Groups under k8s.io are reserved for APIs approved by the Kubernetes project;
// the API server accepts this one (the seed's group) only because the
// api-approved.kubernetes.io annotation says it is unapproved.
func CRD() *apiextensionsv1.CustomResourceDefinition {
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}
	condition := apiextensionsv1.JSONSchemaProps{
		Type:     "object",
		Required: []string{"type", "status", "lastTransitionTime", "reason", "message"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"type":               str,
			"status":             {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"True"`)}, {Raw: []byte(`"False"`)}, {Raw: []byte(`"Unknown"`)}}},
			"observedGeneration": {Type: "integer", Format: "int64"},
			"lastTransitionTime": {Type: "string", Format: "date-time"},
			"reason":             str,
			"message":            str,
		},
	}
	schema := &apiextensionsv1.JSONSchemaProps{
		Type: "object",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"spec": {
				Type:     "object",
				Required: []string{"cidr", "gateway"},
				// Deliberately only strings: the controller validates them and reports
				// problems in the Ready condition, as the example means to show.
				Properties: map[string]apiextensionsv1.JSONSchemaProps{"cidr": str, "gateway": str},
			},
			"status": {
				Type: "object",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"conditions": {
						Type:         "array",
						Items:        &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &condition},
						XListType:    ptr("map"),
						XListMapKeys: []string{"type"},
					},
					"observedGeneration": {Type: "integer", Format: "int64"},
				},
			},
		},
	}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{
			Name:        CRDName,
			Annotations: map[string]string{"api-approved.kubernetes.io": "unapproved, example only"},
		},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: Resource, Singular: "network", Kind: Kind, ListKind: Kind + "List", ShortNames: []string{"net"},
			},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: Version, Served: true, Storage: true,
				Schema:       &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: schema},
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{
					{Name: "CIDR", Type: "string", JSONPath: ".spec.cidr"},
					{Name: "Gateway", Type: "string", JSONPath: ".spec.gateway"},
					{Name: "Ready", Type: "string", JSONPath: `.status.conditions[?(@.type=="Ready")].status`},
					{Name: "Reason", Type: "string", JSONPath: `.status.conditions[?(@.type=="Ready")].reason`},
				},
			}},
		},
	}
}

func ptr[T any](v T) *T { return &v }

// Install creates the Network CRD (see CRD) through the apiextensions API, or leaves
// an existing one as it is, and waits until the API server serves the resource: the
// CRD is Established and a LIST of networks succeeds. It needs the rights of the
// "Install" ClusterRole of rbac.yaml, not the controller's. It gives up when ctx ends
// or after InstallTimeout.
func Install(ctx context.Context, cfg *rest.Config) error {
	if err := crdinstall.Install(ctx, cfg, CRD(), GroupVersionResource, InstallTimeout); err != nil {
		return fmt.Errorf("network: Install: %w", err)
	}
	return nil
}
