package testenv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// grantWait bounds the wait for a grant or a revocation to take effect.
const grantWait = 30 * time.Second

// clusterRolePrefix starts the names of the ClusterRoles and ClusterRoleBindings that
// GrantCluster makes, so that they never replace the server's own (admin, view, …).
const clusterRolePrefix = "testenv:"

// Grant gives user the rules in namespace ns, as the admin user: a Role named after the
// user (replaced if it exists, so a second Grant replaces the first) and a RoleBinding
// of it to the user. It returns once the API server allows every verb of every rule on
// every resource named (on each of the rule's ResourceNames when it has some), asked
// through SubjectAccessReviews: the server's authorizer learns of new roles through a
// watch, so a request made right after the writes can still be refused. Rules that grant
// no resource (no APIGroups, or only NonResourceURLs) are not waited for. It fails t on
// error or after 30 seconds.
func (e *Env) Grant(t testing.TB, ns, user string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	if ns == "" {
		t.Fatalf("testenv: grant %s: empty namespace (GrantCluster grants across the cluster)", user)
	}
	if err := e.grant(t.Context(), ns, user, rules); err != nil {
		t.Fatalf("testenv: grant %s in %s: %v", user, ns, err)
	}
}

// GrantCluster gives user the rules across the cluster, as the admin user: a ClusterRole
// named "testenv:" and the user's name (replaced if it exists, so a second GrantCluster
// replaces the first) and a ClusterRoleBinding of it to the user. Like [Env.Grant], it
// returns once the API server allows every verb of every rule on every resource named, in
// every namespace and on cluster-scoped resources alike, and also on every NonResourceURL
// (such as "/healthz"). It fails t on error or after 30 seconds.
func (e *Env) GrantCluster(t testing.TB, user string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	if err := e.grant(t.Context(), "", user, rules); err != nil {
		t.Fatalf("testenv: grant %s across the cluster: %v", user, err)
	}
}

// Revoke undoes [Env.Grant] of user in ns: it deletes the RoleBinding and the Role, and
// returns once the API server no longer allows any request the Role allowed by that
// binding (what another binding allows stays allowed). Revoking what was
// never granted does nothing. It fails t on error or after 30 seconds.
func (e *Env) Revoke(t testing.TB, ns, user string) {
	t.Helper()
	if ns == "" {
		t.Fatalf("testenv: revoke %s: empty namespace (RevokeCluster revokes across the cluster)", user)
	}
	if err := e.revoke(t.Context(), ns, user); err != nil {
		t.Fatalf("testenv: revoke %s in %s: %v", user, ns, err)
	}
}

// RevokeCluster undoes [Env.GrantCluster] of user: it deletes the ClusterRoleBinding and
// the ClusterRole, and returns once the API server no longer allows any request the
// ClusterRole allowed by that binding (what another binding allows stays allowed). Revoking what was never granted does
// nothing. It fails t on error or after 30 seconds.
func (e *Env) RevokeCluster(t testing.TB, user string) {
	t.Helper()
	if err := e.revoke(t.Context(), "", user); err != nil {
		t.Fatalf("testenv: revoke %s across the cluster: %v", user, err)
	}
}

// grant makes the Role and RoleBinding of user in ns, or, when ns is empty, the ClusterRole
// and ClusterRoleBinding, and waits until they are in effect.
func (e *Env) grant(ctx context.Context, ns, user string, rules []rbacv1.PolicyRule) error {
	c, err := kubernetes.NewForConfig(e.Config())
	if err != nil {
		return err
	}
	subjects := []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}
	if ns == "" {
		name := clusterRolePrefix + user
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
		if _, err := c.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			if _, err := c.RbacV1().ClusterRoles().Update(ctx, role, metav1.UpdateOptions{}); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects:   subjects,
		}
		if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	} else {
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
			Subjects:   subjects,
		}
		if _, err := c.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, grantWait)
	defer cancel()
	allowed := func(st authorizationv1.SubjectAccessReviewStatus) bool { return st.Allowed }
	for _, spec := range accessSpecs(ns, user, rules) {
		if err := waitAccess(ctx, c, spec, allowed); err != nil {
			return err
		}
	}
	return nil
}

// revoke deletes what grant made for user in ns (across the cluster when ns is empty) and
// waits until the server refuses what it allowed.
func (e *Env) revoke(ctx context.Context, ns, user string) error {
	c, err := kubernetes.NewForConfig(e.Config())
	if err != nil {
		return err
	}
	var rules []rbacv1.PolicyRule
	var errBinding, errRole error
	if ns == "" {
		name := clusterRolePrefix + user
		role, err := c.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if role != nil {
			rules = role.Rules
		}
		errBinding = c.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
		errRole = c.RbacV1().ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{})
	} else {
		role, err := c.RbacV1().Roles(ns).Get(ctx, user, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if role != nil {
			rules = role.Rules
		}
		errBinding = c.RbacV1().RoleBindings(ns).Delete(ctx, user, metav1.DeleteOptions{})
		errRole = c.RbacV1().Roles(ns).Delete(ctx, user, metav1.DeleteOptions{})
	}
	for _, err := range []error{errBinding, errRole} {
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, grantWait)
	defer cancel()
	// The RBAC authorizer names the binding that allowed a request in the reason; a request
	// that another binding allows (the server's own for "/version", say) stays allowed.
	binding := fmt.Sprintf("RoleBinding %q", user+"/"+ns)
	if ns == "" {
		binding = fmt.Sprintf("ClusterRoleBinding %q", clusterRolePrefix+user)
	}
	gone := func(st authorizationv1.SubjectAccessReviewStatus) bool {
		return !st.Allowed || !strings.Contains(st.Reason, binding)
	}
	for _, spec := range accessSpecs(ns, user, rules) {
		if err := waitAccess(ctx, c, spec, gone); err != nil {
			return err
		}
	}
	return nil
}

// accessSpecs lists, as SubjectAccessReview specs for user, the requests in ns that rules
// allow (in every namespace and on cluster-scoped resources when ns is empty): every verb on
// every resource of every group, on each name of the rule's ResourceNames when it has some
// (the server allows a rule with names only for requests that name one of them), and, when
// ns is empty, every verb on every NonResourceURL.
func accessSpecs(ns, user string, rules []rbacv1.PolicyRule) []authorizationv1.SubjectAccessReviewSpec {
	var all []authorizationv1.SubjectAccessReviewSpec
	for _, r := range rules {
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, group := range r.APIGroups {
			for _, res := range r.Resources {
				for _, verb := range r.Verbs {
					for _, name := range names {
						attrs := &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: res, Name: name}
						all = append(all, authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: attrs})
					}
				}
			}
		}
		if ns != "" {
			continue // a Role cannot hold NonResourceURLs
		}
		for _, url := range r.NonResourceURLs {
			for _, verb := range r.Verbs {
				attrs := &authorizationv1.NonResourceAttributes{Path: url, Verb: verb}
				all = append(all, authorizationv1.SubjectAccessReviewSpec{User: user, NonResourceAttributes: attrs})
			}
		}
	}
	return all
}

// waitAccess asks the API server about spec until done accepts its answer.
func waitAccess(ctx context.Context, c kubernetes.Interface, spec authorizationv1.SubjectAccessReviewSpec, done func(authorizationv1.SubjectAccessReviewStatus) bool) error {
	review := &authorizationv1.SubjectAccessReview{Spec: spec}
	for {
		got, err := c.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err == nil && done(got.Status) {
			return nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("allowed %v: %s", got.Status.Allowed, got.Status.Reason)
			}
			return fmt.Errorf("%s: %w (%v)", describeAccess(spec), err, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// describeAccess names the request of spec for error messages.
func describeAccess(spec authorizationv1.SubjectAccessReviewSpec) string {
	if a := spec.NonResourceAttributes; a != nil {
		return a.Verb + " " + a.Path
	}
	a := spec.ResourceAttributes
	s := a.Verb + " " + a.Group + "/" + a.Resource
	if a.Name != "" {
		s += " " + a.Name
	}
	if a.Namespace != "" {
		s += " in " + a.Namespace
	}
	return s
}
