package podset

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

// installTimeout bounds Install's wait for the API server to serve PodSets.
const installTimeout = time.Minute

// CRD returns the CustomResourceDefinition of PodSet: namespaced, v1alpha1, with the
// status and scale subresources. The Pod template is kept as it is
// (x-kubernetes-preserve-unknown-fields); the API server validates it when the
// controller creates Pods from it.
func CRD() *apiextensionsv1.CustomResourceDefinition {
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}
	int32Prop := apiextensionsv1.JSONSchemaProps{Type: "integer", Format: "int32", Minimum: ptr.To(0.0)}
	selector := apiextensionsv1.JSONSchemaProps{
		Type: "object",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"matchLabels": {Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Schema: &str}},
			"matchExpressions": {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
				Type:     "object",
				Required: []string{"key", "operator"},
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"key":      str,
					"operator": {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"In"`)}, {Raw: []byte(`"NotIn"`)}, {Raw: []byte(`"Exists"`)}, {Raw: []byte(`"DoesNotExist"`)}}},
					"values":   {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &str}},
				},
			}}},
		},
	}
	replicas := int32Prop
	replicas.Default = &apiextensionsv1.JSON{Raw: []byte("1")}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: Resource + "." + Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: Group,
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: Resource, Singular: "podset", Kind: Kind, ListKind: Kind + "List", ShortNames: []string{"ps"}},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type:     "object",
					Required: []string{"spec"},
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {
							Type:     "object",
							Required: []string{"selector", "template"},
							Properties: map[string]apiextensionsv1.JSONSchemaProps{
								"replicas": replicas,
								"selector": selector,
								"template": {Type: "object", XPreserveUnknownFields: ptr.To(true)},
							},
						},
						"status": {
							Type: "object",
							Properties: map[string]apiextensionsv1.JSONSchemaProps{
								"replicas":           int32Prop,
								"readyReplicas":      int32Prop,
								"observedGeneration": {Type: "integer", Format: "int64"},
								"selector":           str,
							},
						},
					},
				}},
				Subresources: &apiextensionsv1.CustomResourceSubresources{
					Status: &apiextensionsv1.CustomResourceSubresourceStatus{},
					Scale: &apiextensionsv1.CustomResourceSubresourceScale{
						SpecReplicasPath:   ".spec.replicas",
						StatusReplicasPath: ".status.replicas",
						LabelSelectorPath:  ptr.To(".status.selector"),
					},
				},
				AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{
					{Name: "Desired", Type: "integer", JSONPath: ".spec.replicas"},
					{Name: "Current", Type: "integer", JSONPath: ".status.replicas"},
					{Name: "Ready", Type: "integer", JSONPath: ".status.readyReplicas"},
					{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
				},
			}},
		},
	}
}

// Install creates the PodSet CRD (see CRD) through the apiextensions API and waits
// until it is Established and PodSets can be listed, for at most a minute (less if ctx
// ends first). It is idempotent: an existing CRD of that name is kept as it is. It
// needs the rights of the "Install" ClusterRole in rbac.yaml.
func Install(ctx context.Context, cfg *rest.Config) error {
	if err := crdinstall.Install(ctx, cfg, CRD(), GroupVersionResource, installTimeout); err != nil {
		return fmt.Errorf("podset: install: %w", err)
	}
	return nil
}
