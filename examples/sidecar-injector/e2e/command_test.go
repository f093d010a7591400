//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/internal/rbacfile"
)

// TestCommand builds the sidecar-injector command, runs it with a kubeconfig for the
// least-privilege user, checks that it injects, and that SIGTERM stops it cleanly.
func TestCommand(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the example: %v", err)
	}
	bin := filepath.Join(dir, "sidecar-injector")
	if out, err := exec.Command(gobin, "build", "-o", bin, "..").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	c := admin(t)
	h := &harness{ns: "command", admin: c}
	for _, name := range []string{cmNamespace, h.ns} {
		_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	if err := rbacfile.Apply(ctx, c, "../rbac.yaml", "controller"); err != nil {
		t.Fatal(err)
	}
	h.setConfig(t, envoyV1)

	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig, "controller"); err != nil {
		t.Fatal(err)
	}

	var stderr bytes.Buffer
	cmd := exec.Command(bin, "-kubeconfig", kubeconfig, "-namespace", h.ns, "-v", "1")
	cmd.Env = append(os.Environ(), "KUBECONFIG=/nonexistent") // the flag must win
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // no-op once it has exited
		<-exited
	})

	h.create(t, deployment(h.ns, "web", true, "app"))
	h.waitSidecar(t, "web", withEnvoy, dataAndConf, "envoyproxy/envoy:v1")

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30s after SIGTERM\n%s", stderr.String())
	}
	if log := stderr.String(); !strings.Contains(log, `"msg"="patched"`) || !strings.Contains(log, `"msg"="stopped"`) {
		t.Errorf("log lacks the patch or the stop:\n%s", log)
	}
}
