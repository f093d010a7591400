//go:build e2e

package e2e

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCommand builds the example's main package and runs it as the
// least-privilege user with a kubeconfig file and -leader-elect: it makes a
// Foo's Deployment, and exits 0 on SIGTERM.
func TestCommand(t *testing.T) {
	setup(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "foo-controller")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "github.com/ctrlkit/ctrlkit/examples/foo-controller")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig, "controller"); err != nil {
		t.Fatal(err)
	}

	ns := env.Namespace(t)
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "-kubeconfig", kubeconfig, "-namespace", ns, "-leader-elect")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			cmd.Process.Kill()
			<-exited
		}
	}()

	createFoo(t, ns, "cmd", "cmd-nginx", 2)
	waitReplicas(t, ns, "cmd-nginx", 2)

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, stderr.String())
		}
	case <-time.After(converge):
		t.Fatalf("still running %v after SIGTERM\n%s", converge, stderr.String())
	}
	if !strings.Contains(stderr.String(), "controller stopped") {
		t.Errorf("no clean stop in the log:\n%s", stderr.String())
	}
}
