package main

import (
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func crdWith(conds ...apiextensionsv1.CustomResourceDefinitionCondition) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{Status: apiextensionsv1.CustomResourceDefinitionStatus{Conditions: conds}}
}

func cond(typ apiextensionsv1.CustomResourceDefinitionConditionType, status apiextensionsv1.ConditionStatus, at time.Time) apiextensionsv1.CustomResourceDefinitionCondition {
	return apiextensionsv1.CustomResourceDefinitionCondition{Type: typ, Status: status, LastTransitionTime: metav1.NewTime(at)}
}

// The hold ends crdCreateHold after the latest CRD became Established; other conditions,
// and an Established condition that is not true, do not count.
func TestCreateHoldEnd(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	crds := []*apiextensionsv1.CustomResourceDefinition{
		crdWith(cond(apiextensionsv1.NamesAccepted, apiextensionsv1.ConditionTrue, t0.Add(time.Minute)),
			cond(apiextensionsv1.Established, apiextensionsv1.ConditionTrue, t0)),
		crdWith(cond(apiextensionsv1.Established, apiextensionsv1.ConditionTrue, t0.Add(time.Second))),
		crdWith(cond(apiextensionsv1.Established, apiextensionsv1.ConditionFalse, t0.Add(time.Hour))),
	}
	if got, want := createHoldEnd(crds), t0.Add(time.Second+crdCreateHold); !got.Equal(want) {
		t.Errorf("createHoldEnd = %v, want %v", got, want)
	}
	if got := createHoldEnd(crds[2:]); !got.IsZero() {
		t.Errorf("createHoldEnd of a CRD not established = %v, want the zero time", got)
	}
}
