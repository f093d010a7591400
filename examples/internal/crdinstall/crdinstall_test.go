package crdinstall

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.uber.org/goleak"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leakcheck.Options()...) }

func crdWith(conds ...apiextensionsv1.CustomResourceDefinitionCondition) *apiextensionsv1.CustomResourceDefinition {
	c := &apiextensionsv1.CustomResourceDefinition{}
	c.Name = "things.example.com"
	c.Status.Conditions = conds
	return c
}

func TestServedErr(t *testing.T) {
	est := apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}
	notEst := apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionFalse}
	refused := apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionFalse, Message: "plural clash"}

	if err := servedErr(crdWith(est)); err != nil {
		t.Errorf("established: %v", err)
	}
	for name, c := range map[string]*apiextensionsv1.CustomResourceDefinition{
		"no conditions": crdWith(),
		"not yet":       crdWith(notEst),
	} {
		err := servedErr(c)
		var r *namesRefused
		if err == nil || errors.As(err, &r) {
			t.Errorf("%s: err = %v, want a not-established error to wait on", name, err)
		}
	}
	err := servedErr(crdWith(refused, est))
	var r *namesRefused
	if !errors.As(err, &r) || !strings.Contains(err.Error(), "plural clash") {
		t.Errorf("names refused: err = %v, want a namesRefused naming the reason", err)
	}
}

func TestInstallNilConfig(t *testing.T) {
	if err := Install(context.Background(), nil, crdWith(), schema.GroupVersionResource{}, 0); err == nil {
		t.Error("nil config: no error")
	}
}
