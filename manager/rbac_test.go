package manager

import (
	"context"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ctrlkit/ctrlkit/internal/rbacfile"
)

// allows reports whether one of rules allows verb on resource of group.
func allows(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
			return true
		}
	}
	return false
}

// TestRBACManifest: rbac/rbac.yaml reads as RBAC objects (strictly: no field
// misspelt), binds to the manager's ServiceAccount the Lease rights a leader
// election or a shard needs in its namespace, events, and the reviews of the
// metrics guard across the cluster, and holds unbound ClusterRoles for metrics
// and pprof readers. The e2e tests of manager/e2e run a manager with exactly
// these rights.
func TestRBACManifest(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	if err := rbacfile.Apply(ctx, c, "rbac/rbac.yaml", "manager-user"); err != nil {
		t.Fatal(err)
	}
	role, err := c.RbacV1().Roles("ctrlkit-system").Get(ctx, "ctrlkit-manager-leases", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"get", "list", "watch", "create", "update", "delete"} {
		if !allows(role.Rules, "coordination.k8s.io", "leases", verb) {
			t.Errorf("the leases Role does not allow %s", verb)
		}
	}
	cr, err := c.RbacV1().ClusterRoles().Get(ctx, "ctrlkit-manager", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range [][3]string{
		{"events.k8s.io", "events", "create"}, {"events.k8s.io", "events", "patch"},
		{"authentication.k8s.io", "tokenreviews", "create"},
		{"authorization.k8s.io", "subjectaccessreviews", "create"},
	} {
		if !allows(cr.Rules, want[0], want[1], want[2]) {
			t.Errorf("the manager's ClusterRole does not allow %s %s/%s", want[2], want[0], want[1])
		}
	}
	rbs, _ := c.RbacV1().RoleBindings("ctrlkit-system").List(ctx, metav1.ListOptions{})
	crbs, _ := c.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	var bound []string
	for _, b := range rbs.Items {
		bound = append(bound, b.RoleRef.Kind+"/"+b.RoleRef.Name)
	}
	for _, b := range crbs.Items {
		bound = append(bound, b.RoleRef.Kind+"/"+b.RoleRef.Name)
	}
	slices.Sort(bound)
	if want := []string{"ClusterRole/ctrlkit-manager", "Role/ctrlkit-manager-leases"}; !slices.Equal(bound, want) {
		t.Errorf("bound %v, want %v (the readers' roles unbound)", bound, want)
	}
	for name, urls := range map[string][]string{
		"ctrlkit-metrics-reader": {"/metrics"},
		"ctrlkit-pprof-reader":   {"/debug/pprof/", "/debug/pprof/*"},
	} {
		r, err := c.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := []rbacv1.PolicyRule{{NonResourceURLs: urls, Verbs: []string{"get"}}}
		if d := diff(want, r.Rules); d != "" {
			t.Errorf("%s rules (-want +got):\n%s", name, d)
		}
	}
}
