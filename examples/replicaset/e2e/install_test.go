//go:build e2e

package e2e

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/ctrlkit/ctrlkit/examples/replicaset/podset"
)

// TestInstall: Install is idempotent, and needs rights the controller's role does
// not grant.
func TestInstall(t *testing.T) {
	setup(t) // the first Install
	if err := podset.Install(t.Context(), env.Config()); err != nil {
		t.Fatalf("second Install = %v", err)
	}
	cfg, err := env.UserConfig("controller")
	if err != nil {
		t.Fatal(err)
	}
	if err := podset.Install(t.Context(), cfg); !apierrors.IsForbidden(err) {
		t.Errorf("Install as the controller = %v, want Forbidden", err)
	}
}
