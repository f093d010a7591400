package network

import (
	"fmt"
	"slices"
	"testing"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
)

// conflictingClient returns a controller writing through a fake dynamic client that
// holds one Network, and whose first conflicts writes of the given verb subresource
// ("" or "status") find that another writer got there first: the writer's change
// (a new label value) is stored and the write fails with 409 Conflict. It returns
// counters of the writes and reads the controller made.
func conflictingClient(t *testing.T, subresource string, conflicts int) (c *Controller, stale *Network, writes, gets *int) {
	t.Helper()
	stale = &Network{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", Generation: 2, ResourceVersion: "1", Labels: map[string]string{"writer": "0"}},
		Spec:       Spec{CIDR: "10.0.0.0/24", Gateway: "10.0.0.1"},
	}
	u, err := ToUnstructured(stale)
	if err != nil {
		t.Fatal(err)
	}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{GroupVersionResource: Kind + "List"}, u)
	writes, gets = new(int), new(int)
	client.PrependReactor("get", Resource, func(clienttesting.Action) (bool, runtime.Object, error) {
		*gets++
		return false, nil, nil
	})
	client.PrependReactor("update", Resource, func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != subresource {
			return false, nil, nil
		}
		*writes++
		if *writes > conflicts {
			return false, nil, nil // the tracker applies the write
		}
		// Another writer changes the stored object first.
		obj, err := client.Tracker().Get(GroupVersionResource, "ns", "a")
		if err != nil {
			return true, nil, err
		}
		cur := obj.(*unstructured.Unstructured).DeepCopy()
		cur.SetLabels(map[string]string{"writer": fmt.Sprint(*writes)})
		if err := client.Tracker().Update(GroupVersionResource, cur, "ns"); err != nil {
			return true, nil, err
		}
		return true, nil, apierrors.NewConflict(GroupVersionResource.GroupResource(), "a", fmt.Errorf("the object has been modified"))
	})
	return &Controller{networks: client.Resource(GroupVersionResource), log: logr.Discard()}, stale, writes, gets
}

// TestUpdateRetriesFromFreshState: a finalizer write that conflicts is recomputed on
// the object read again from the server, so it keeps the other writer's change and
// still adds the finalizer.
func TestUpdateRetriesFromFreshState(t *testing.T) {
	c, stale, writes, gets := conflictingClient(t, "", 3)
	got, err := c.update(t.Context(), stale, false, func(n *Network) bool {
		if slices.Contains(n.Finalizers, Finalizer) {
			return false
		}
		n.Finalizers = append(n.Finalizers, Finalizer)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if *writes != 4 || *gets != 3 {
		t.Errorf("writes, re-reads = %d, %d; want 4, 3", *writes, *gets)
	}
	if !slices.Contains(got.Finalizers, Finalizer) || got.Labels["writer"] != "3" {
		t.Errorf("result: finalizers %q, labels %v; want the finalizer and the last writer's label", got.Finalizers, got.Labels)
	}
	stored, err := c.networks.Namespace("ns").Get(t.Context(), "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(stored.GetFinalizers(), Finalizer) || stored.GetLabels()["writer"] != "3" {
		t.Errorf("stored: finalizers %q, labels %v", stored.GetFinalizers(), stored.GetLabels())
	}
}

// TestSetReadyRetriesFromFreshState: the same for status writes, which keep the
// generation that was reconciled.
func TestSetReadyRetriesFromFreshState(t *testing.T) {
	c, stale, writes, _ := conflictingClient(t, "status", 2)
	if err := c.setReady(t.Context(), stale, metav1.ConditionFalse, ReasonInvalidSpec, "bad"); err != nil {
		t.Fatal(err)
	}
	if *writes != 3 {
		t.Errorf("status writes = %d, want 3", *writes)
	}
	u, err := c.networks.Namespace("ns").Get(t.Context(), "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(n.Status.Conditions, ConditionReady)
	if cond == nil || cond.Reason != ReasonInvalidSpec || cond.Message != "bad" || cond.ObservedGeneration != 2 || n.Status.ObservedGeneration != 2 {
		t.Errorf("status = %+v", n.Status)
	}
	if n.Labels["writer"] != "2" {
		t.Errorf("labels = %v; the other writer's change was lost", n.Labels)
	}
	// Writing the same status again is not a write at all.
	if err := c.setReady(t.Context(), n, metav1.ConditionFalse, ReasonInvalidSpec, "bad"); err != nil {
		t.Fatal(err)
	}
	if *writes != 3 {
		t.Errorf("an unchanged status was written again (%d writes)", *writes)
	}
}

// TestUpdateGivesUp: past MaxConflictRetries the conflict is returned, so that the
// reconcile is retried with backoff.
func TestUpdateGivesUp(t *testing.T) {
	c, stale, writes, _ := conflictingClient(t, "", 1000)
	_, err := c.update(t.Context(), stale, false, func(n *Network) bool {
		n.Finalizers = []string{Finalizer}
		return true
	})
	if !apierrors.IsConflict(err) {
		t.Fatalf("update = %v, want a conflict", err)
	}
	if *writes != MaxConflictRetries+1 {
		t.Errorf("writes = %d, want %d", *writes, MaxConflictRetries+1)
	}
}
