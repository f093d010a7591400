package testenv

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// notLabel matches the runs of characters a namespace name may not hold.
var notLabel = regexp.MustCompile(`[^a-z0-9-]+`)

// maxNamespace is the longest namespace name the API server takes (a DNS label).
const maxNamespace = 63

// Namespace creates a namespace for the test t, as the admin user, and returns its name:
// t's name in lower case, with every run of characters other than a-z, 0-9 and '-'
// replaced by one '-', cut from the front to fit, and ended by "-" and a number unique
// within e, so that several calls in one test, and a test run again with -count, get
// names of their own. It fails t if the namespace cannot be created. The namespace is
// not deleted afterwards: no namespace controller runs here to empty and remove it.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	name := namespaceName(t.Name(), e.namespaces.Add(1))
	c, err := kubernetes.NewForConfig(e.Config())
	if err != nil {
		t.Fatalf("testenv: namespace %s: %v", name, err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("testenv: namespace %s: %v", name, err)
	}
	return name
}

// namespaceName returns the name Namespace gives to the n-th namespace of the test
// named test.
func namespaceName(test string, n int64) string {
	suffix := "-" + strconv.FormatInt(n, 10)
	name := strings.Trim(notLabel.ReplaceAllString(strings.ToLower(test), "-"), "-")
	if keep := maxNamespace - len(suffix); len(name) > keep {
		name = strings.TrimLeft(name[len(name)-keep:], "-")
	}
	if name == "" {
		name = "test"
	}
	return name + suffix
}
