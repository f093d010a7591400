//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/examples/network-controller/network"
)

// TestCommand builds the network-controller command, runs it with a kubeconfig of the
// least-privilege user and its in-process backend, checks that it provisions a
// Network, and that SIGTERM makes it exit cleanly.
func TestCommand(t *testing.T) {
	ns := setup(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "network-controller")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig, "controller"); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-kubeconfig", kubeconfig, "-namespace", ns, "-state-dir", filepath.Join(dir, "state"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logs := make(chan string, 1)
	go func() {
		var b strings.Builder
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
		}
		logs <- b.String()
	}()

	create(t, ns, "cmd", "192.168.0.0/16", "192.168.0.1")
	eventually(t, converge, "provisioned by the command", func() string {
		if n := get(t, ns, "cmd"); !hasReason(n, metav1.ConditionTrue, network.ReasonProvisioned) {
			return ready(n)
		}
		return ""
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	out := <-logs
	if err != nil {
		t.Fatalf("the command exited with %v; its log:\n%s", err, out)
	}
	for _, want := range []string{"backend running", "backend network provisioned", "controller stopped"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
	// The in-process backend kept its state on disk.
	state, err := os.ReadFile(filepath.Join(dir, "state", "networks.json"))
	if err != nil || !strings.Contains(string(state), `"name": "cmd"`) {
		t.Errorf("backend state: %s, %v", state, err)
	}
}
