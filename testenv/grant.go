package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// grantWait bounds the wait for a grant to take effect.
const grantWait = 30 * time.Second

// Grant gives user the rules in namespace ns, as the admin user: a Role named after the
// user (replaced if it exists, so a second Grant replaces the first) and a RoleBinding
// of it to the user. It returns once the API server allows every verb of every rule on
// every resource named, asked through SubjectAccessReviews: the server's authorizer
// learns of new roles through a watch, so a request made right after the writes can
// still be refused. Rules that grant no resource (no APIGroups, or only NonResourceURLs)
// are not waited for. It fails t on error or after 30 seconds.
func (e *Env) Grant(t testing.TB, ns, user string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	if err := e.grant(t.Context(), ns, user, rules); err != nil {
		t.Fatalf("testenv: grant %s in %s: %v", user, ns, err)
	}
}

func (e *Env) grant(ctx context.Context, ns, user string, rules []rbacv1.PolicyRule) error {
	c, err := kubernetes.NewForConfig(e.Config())
	if err != nil {
		return err
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns}, Rules: rules}
	if _, err := c.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		if _, err := c.RbacV1().Roles(ns).Update(ctx, role, metav1.UpdateOptions{}); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := c.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, grantWait)
	defer cancel()
	for _, attrs := range resourceAttributes(ns, rules) {
		if err := waitAllowed(ctx, c, user, attrs); err != nil {
			return err
		}
	}
	return nil
}

// resourceAttributes lists the requests in ns that rules allow: every verb on every resource
// of every group, on each name of the rule's ResourceNames when it has some (the server
// allows a rule with names only for requests that name one of them).
func resourceAttributes(ns string, rules []rbacv1.PolicyRule) []*authorizationv1.ResourceAttributes {
	var all []*authorizationv1.ResourceAttributes
	for _, r := range rules {
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, group := range r.APIGroups {
			for _, res := range r.Resources {
				for _, verb := range r.Verbs {
					for _, name := range names {
						all = append(all, &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: res, Name: name})
					}
				}
			}
		}
	}
	return all
}

// waitAllowed asks the API server whether user may do attrs until it says yes.
func waitAllowed(ctx context.Context, c kubernetes.Interface, user string, attrs *authorizationv1.ResourceAttributes) error {
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: attrs}}
	for {
		got, err := c.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err == nil && got.Status.Allowed {
			return nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("not allowed: %s", got.Status.Reason)
			}
			return fmt.Errorf("%s %s/%s %s: %w (%v)", attrs.Verb, attrs.Group, attrs.Resource, attrs.Name, err, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
