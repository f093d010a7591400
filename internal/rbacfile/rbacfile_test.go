package rbacfile

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leakcheck.Options()...) }

const manifest = `# controller rights
apiVersion: v1
kind: ServiceAccount
metadata: {name: ctl, namespace: sys}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: ctl}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: ctl}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: ctl}
subjects:
- {kind: ServiceAccount, name: ctl, namespace: sys}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: ctl, namespace: sys}
rules:
- apiGroups: [""]
  resources: [events]
  verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: ctl, namespace: sys}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: ctl}
subjects:
- {kind: ServiceAccount, name: ctl, namespace: sys}
`

func write(t *testing.T, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rbac.yaml")
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestApplyBindsToUser(t *testing.T) {
	ctx := context.Background()
	client := fake.NewSimpleClientset()
	if err := Apply(ctx, client, write(t, manifest), "alice"); err != nil {
		t.Fatal(err)
	}
	cr, err := client.RbacV1().ClusterRoles().Get(ctx, "ctl", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := cr.Rules[0].Verbs; strings.Join(got, ",") != "get,list,watch" {
		t.Errorf("cluster role verbs = %v", got)
	}
	want := rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}
	crb, err := client.RbacV1().ClusterRoleBindings().Get(ctx, "ctl", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(crb.Subjects) != 1 || crb.Subjects[0] != want {
		t.Errorf("cluster role binding subjects = %v, want only %v", crb.Subjects, want)
	}
	rb, err := client.RbacV1().RoleBindings("sys").Get(ctx, "ctl", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rb.Subjects) != 1 || rb.Subjects[0] != want {
		t.Errorf("role binding subjects = %v, want only %v", rb.Subjects, want)
	}
	if _, err := client.RbacV1().Roles("sys").Get(ctx, "ctl", metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
	// Applying again is harmless.
	if err := Apply(ctx, client, write(t, manifest), "alice"); err != nil {
		t.Errorf("second Apply: %v", err)
	}
}

func TestApplyRejects(t *testing.T) {
	for name, doc := range map[string]string{
		"other kind":    "apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: sys}\n",
		"unknown field": "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: x}\nrulez: []\n",
		"role no ns":    "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: x}\n",
		"only comments": "# nothing\n",
		"broken yaml":   "kind: [\n",
	} {
		t.Run(name, func(t *testing.T) {
			if err := Apply(context.Background(), fake.NewSimpleClientset(), write(t, doc), "u"); err == nil || !strings.HasPrefix(err.Error(), "rbacfile: ") {
				t.Errorf("Apply = %v, want an rbacfile error", err)
			}
		})
	}
	if err := Apply(context.Background(), fake.NewSimpleClientset(), filepath.Join(t.TempDir(), "missing.yaml"), "u"); err == nil {
		t.Error("missing file: no error")
	}
}
