package testenv

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The versions testenv names must be the ones the tools modules and the Makefile build;
// otherwise Start would look in a cache folder that `make controlplane` never fills.
func TestVersionsAgreeWithToolsAndMakefile(t *testing.T) {
	checks := []struct {
		file, pattern, want string
	}{
		{"../tools/kube-apiserver/go.mod", `k8s\.io/kubernetes (v\S+)`, KubernetesVersion},
		{"../tools/etcd/go.mod", `go\.etcd\.io/etcd/server/v3 (v\S+)`, EtcdVersion},
		{"../Makefile", `K8S_VERSION\s*:=\s*(v\S+)`, KubernetesVersion},
		{"../Makefile", `ETCD_VERSION\s*:=\s*(v\S+)`, EtcdVersion},
	}
	for _, c := range checks {
		b, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(c.pattern).FindSubmatch(b)
		if m == nil {
			t.Fatalf("%s: no match for %s", c.file, c.pattern)
		}
		if got := string(m[1]); got != c.want {
			t.Errorf("%s pins %s, testenv expects %s", c.file, got, c.want)
		}
	}
	// Every staging module of the apiserver build must be pinned to the matching v0 version.
	b, err := os.ReadFile("../tools/kube-apiserver/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	staging := "v0" + strings.TrimPrefix(KubernetesVersion, "v1")
	for _, m := range regexp.MustCompile(`(k8s\.io/[\w-]+) => k8s\.io/[\w-]+ (v\S+)`).FindAllSubmatch(b, -1) {
		if string(m[2]) != staging {
			t.Errorf("%s is replaced by %s, want %s", m[1], m[2], staging)
		}
	}
}

func TestStartWithoutBinariesNamesTheBuildCommand(t *testing.T) {
	empty := t.TempDir()
	for name, cfg := range map[string]Config{
		"BinDir": {BinDir: empty},
	} {
		_, err := Start(context.Background(), cfg)
		if err == nil {
			t.Fatalf("%s: Start succeeded without binaries", name)
		}
		for _, want := range []string{"make controlplane", BinEnv, empty} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not mention %q", name, err, want)
			}
		}
	}
	t.Setenv(BinEnv, empty)
	if _, err := Start(context.Background(), Config{}); err == nil || !strings.Contains(err.Error(), empty) {
		t.Errorf("with %s set to an empty folder: %v", BinEnv, err)
	}
}

func TestStartFailureReportsLogTail(t *testing.T) {
	// Fake binaries that fail at once: Start must return their output and clean up.
	dir := t.TempDir()
	for _, name := range []string{"etcd", "kube-apiserver"} {
		script := "#!/bin/sh\necho \"" + name + " cannot start: disk on fire\" >&2\nexit 3\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	_, err := Start(context.Background(), Config{BinDir: dir})
	if err == nil || !strings.Contains(err.Error(), "etcd cannot start: disk on fire") {
		t.Fatalf("Start = %v, want the etcd log tail in the error", err)
	}
	after, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	if len(after) > len(before) {
		t.Fatalf("failed Start left a directory behind: %v", after)
	}
}

func TestInvalidUsers(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"etcd", "kube-apiserver"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, users := range [][]User{
		{{Name: ""}},
		{{Name: "a,b"}},
		{{Name: "bob"}, {Name: "bob"}},
		{{Name: AdminUser}},
	} {
		_, err := Start(context.Background(), Config{BinDir: dir, Users: users})
		if err == nil || !strings.Contains(err.Error(), "user") {
			t.Errorf("users %v: err = %v, want a user error", users, err)
		}
	}
}

func TestUnknownUserConfig(t *testing.T) {
	e := &Env{tokens: map[string]string{AdminUser: "t"}}
	if _, err := e.UserConfig("nobody"); err == nil || !strings.Contains(err.Error(), "nobody") {
		t.Fatalf("UserConfig(nobody) = %v, want an error naming the user", err)
	}
}

// namespaceName makes a valid namespace name (a DNS label of at most 63 characters)
// from any test name, distinct for each number.
func TestNamespaceName(t *testing.T) {
	label := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	cases := []struct {
		test string
		n    int64
		want string
	}{
		{"TestRelist/paginated", 1, "testrelist-paginated-1"},
		{"TestA/under_score/#01", 12, "testa-under-score-01-12"},
		{"__", 3, "test-3"},
		{"Test/" + strings.Repeat("x", 60) + "-y", 100, strings.Repeat("x", 57) + "-y-100"},
		// Cut to 61 characters, the first one a '-': trimmed.
		{"Test/" + strings.Repeat("x", 10) + "/" + strings.Repeat("z", 49), 5, strings.Repeat("x", 10) + "-" + strings.Repeat("z", 49) + "-5"},
	}
	for _, c := range cases {
		got := namespaceName(c.test, c.n)
		if got != c.want {
			t.Errorf("namespaceName(%q, %d) = %q, want %q", c.test, c.n, got, c.want)
		}
		if len(got) > maxNamespace || !label.MatchString(got) {
			t.Errorf("namespaceName(%q, %d) = %q: not a DNS label", c.test, c.n, got)
		}
	}
}
