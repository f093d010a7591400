// Package rbacfile grants a user exactly the rights an RBAC manifest (an example's, or
// the manager's manager/rbac/rbac.yaml) gives its ServiceAccount, so that end-to-end
// tests run with least privilege and prove the manifest is sufficient.
package rbacfile

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// Apply reads the multi-document YAML file at path and creates its Roles and ClusterRoles,
// and its RoleBindings and ClusterRoleBindings with every subject replaced by the
// static-token user named user. ServiceAccounts in the file are ignored (the user stands in
// for them); any other kind is an error, so a manifest cannot silently grant more than the
// test sees. Objects that already exist are left as they are. Namespaced objects must name
// their namespace, and the namespace must exist.
func Apply(ctx context.Context, client kubernetes.Interface, path, user string) error {
	docs, err := read(path)
	if err != nil {
		return err
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	for i, doc := range docs {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return fmt.Errorf("rbacfile: %s document %d: %w", path, i+1, err)
		}
		if err := create(ctx, client, meta.Kind, doc, subjects); err != nil {
			return fmt.Errorf("rbacfile: %s document %d (%s): %w", path, i+1, meta.Kind, err)
		}
	}
	return nil
}

func read(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rbacfile: %w", err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("rbacfile: %s: %w", path, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 || isComment(doc) {
			continue
		}
		docs = append(docs, doc)
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("rbacfile: %s holds no objects", path)
	}
	return docs, nil
}

func create(ctx context.Context, client kubernetes.Interface, kind string, doc []byte, subjects []rbacv1.Subject) error {
	rbac := client.RbacV1()
	var err error
	switch kind {
	case "ServiceAccount":
		return nil
	case "ClusterRole":
		var o rbacv1.ClusterRole
		if err = yaml.UnmarshalStrict(doc, &o); err == nil {
			_, err = rbac.ClusterRoles().Create(ctx, &o, metav1.CreateOptions{})
		}
	case "Role":
		var o rbacv1.Role
		if err = yaml.UnmarshalStrict(doc, &o); err == nil {
			if o.Namespace == "" {
				return errors.New("no namespace")
			}
			_, err = rbac.Roles(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		}
	case "ClusterRoleBinding":
		var o rbacv1.ClusterRoleBinding
		if err = yaml.UnmarshalStrict(doc, &o); err == nil {
			o.Subjects = subjects
			_, err = rbac.ClusterRoleBindings().Create(ctx, &o, metav1.CreateOptions{})
		}
	case "RoleBinding":
		var o rbacv1.RoleBinding
		if err = yaml.UnmarshalStrict(doc, &o); err == nil {
			if o.Namespace == "" {
				return errors.New("no namespace")
			}
			o.Subjects = subjects
			_, err = rbac.RoleBindings(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		}
	default:
		return errors.New("unsupported kind")
	}
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// isComment reports whether a document holds only YAML comments.
func isComment(doc []byte) bool {
	for _, line := range bytes.Split(doc, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' {
			return false
		}
	}
	return true
}
