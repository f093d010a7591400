//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctrlkit/ctrlkit/testenv"
)

// userMain is the program of a module outside this repository that needs a control plane:
// it builds one with testenv.Build into the folder named by its argument, starts it from
// there, and makes one API call.
const userMain = `package main

import (
	"context"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/testenv"
)

func main() {
	ctx := context.Background()
	start := time.Now()
	dir, err := testenv.Build(ctx, testenv.BuildConfig{Dir: os.Args[1], Progress: os.Stderr, ProgressInterval: 10 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("built in %s\n", time.Since(start).Round(time.Second))
	env, err := testenv.Start(ctx, testenv.Config{BinDir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer env.Stop()
	ns, err := kubernetes.NewForConfigOrDie(env.Config()).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("namespace %s is %s\n", ns.Name, ns.Status.Phase)
}
`

// repoRoot returns the folder of ctrlkit's go.mod, up from the working directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && strings.HasPrefix(string(b), "module github.com/ctrlkit/ctrlkit\n") {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatalf("no ctrlkit go.mod above %s", wd)
		}
	}
}

// TestBuildFromAModuleOutsideTheRepository: a module of its own, outside the repository,
// that requires ctrlkit (replaced by this checkout, as a released version would be fetched)
// builds the control plane with testenv.Build into a new folder, starts it from there and
// talks to it; then `go run github.com/ctrlkit/ctrlkit/testenv/cmd/controlplane` in that
// module finds the folder filled and prints it. With the Go build cache warm from `make
// controlplane` (the same -trimpath build), the build only links.
func TestBuildFromAModuleOutsideTheRepository(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the control plane: %v", err)
	}
	root := repoRoot(t)
	user := t.TempDir()
	gomod := "module example.com/user\n\ngo 1.26.0\n\nrequire github.com/ctrlkit/ctrlkit v0.0.0\n\n" +
		"replace github.com/ctrlkit/ctrlkit => " + root + "\n"
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"go.mod": gomod, "go.sum": string(sum), "main.go": userMain} {
		if err := os.WriteFile(filepath.Join(user, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(t.TempDir(), "controlplane")
	goEnv := append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", testenv.BinEnv+"=")

	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, gobin, "run", ".", bin)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = user, goEnv, &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("go run . %s: %v\nstdout:\n%s\nstderr:\n%s", bin, err, &stdout, &stderr)
	}
	t.Logf("build, start and one call from the outside module took %v; it said:\n%s\nprogress:\n%s", time.Since(start).Round(time.Second), &stdout, &stderr)
	if !strings.Contains(stdout.String(), "namespace default is Active") {
		t.Errorf("the outside module's program did not reach the API server:\n%s", &stdout)
	}
	for _, want := range []string{testenv.BuildEstimate, "testenv: etcd: built in", "testenv: kube-apiserver: built in"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("progress lacks %q", want)
		}
	}
	for _, name := range []string{"etcd", "kube-apiserver"} {
		if st, err := os.Stat(filepath.Join(bin, name)); err != nil || st.Mode()&0o111 == 0 {
			t.Errorf("%s not built in %s: %v", name, bin, err)
		}
	}

	stdout.Reset()
	stderr.Reset()
	cmd = exec.CommandContext(ctx, gobin, "run", "github.com/ctrlkit/ctrlkit/testenv/cmd/controlplane", "-dir", bin)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = user, goEnv, &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go run .../testenv/cmd/controlplane: %v\n%s", err, &stderr)
	}
	if got := strings.TrimSpace(stdout.String()); got != bin {
		t.Errorf("the command printed %q, want the folder %s", got, bin)
	}
	if !strings.Contains(stderr.String(), "already") {
		t.Errorf("the command did not report the binaries as built already:\n%s", &stderr)
	}
}
