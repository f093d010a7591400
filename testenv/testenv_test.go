package testenv

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Without binaries, Start's error names the exact command that builds them where it looked,
// and every folder it looked in.
func TestStartWithoutBinariesNamesTheBuildCommand(t *testing.T) {
	const command = "`go run github.com/ctrlkit/ctrlkit/testenv/cmd/controlplane"
	empty := t.TempDir()
	_, err := Start(context.Background(), Config{BinDir: empty})
	if err == nil {
		t.Fatal("Start succeeded without binaries")
	}
	for _, want := range []string{command + " -dir " + empty + "`", "make controlplane", BinEnv, "looked in " + empty + ")"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("with BinDir: error %q does not mention %q", err, want)
		}
	}

	fromEnv := filepath.Join(t.TempDir(), "from env")
	t.Setenv(BinEnv, fromEnv)
	_, err = Start(context.Background(), Config{})
	if want := command + " -dir '" + fromEnv + "'`"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("with %s set to an empty folder: %v, want it to name %s", BinEnv, err, want)
	}

	// Neither: the user cache folder only, where the command builds by default.
	t.Setenv(BinEnv, "")
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	wd := t.TempDir()
	t.Chdir(wd)
	def, err := DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	_, err = Start(context.Background(), Config{})
	for _, want := range []string{command + "`", "looked in " + def + ")"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("with no folder named: error %v does not mention %q", err, want)
		}
	}
}

// plantBinaries writes etcd and kube-apiserver scripts into dir that create the file marker
// when run (and then fail), so a test can tell whether Start ran them.
func plantBinaries(t *testing.T, dir, marker string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"etcd", "kube-apiserver"} {
		script := "#!/bin/sh\necho ran > '" + marker + "'\nexit 3\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// Binaries planted in .cache/controlplane/<key> of a parent of the working directory (a
// shared /tmp, say, where anyone can create that folder) are never run: with no folder named,
// Start looks in the user cache folder only.
func TestStartIgnoresBinariesInParentFolders(t *testing.T) {
	parent := t.TempDir()
	marker := filepath.Join(t.TempDir(), "ran")
	for _, d := range []string{parent, filepath.Join(parent, "a")} {
		plantBinaries(t, filepath.Join(d, ".cache", "controlplane", CacheKey()), marker)
	}
	wd := filepath.Join(parent, "a", "b")
	if err := os.MkdirAll(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(wd)
	t.Setenv(BinEnv, "")
	t.Setenv("XDG_CACHE_HOME", t.TempDir())

	if dir, err := findBinaries(""); err == nil {
		t.Fatalf("findBinaries found %s, want no binaries outside the user cache folder", dir)
	}
	_, err := Start(context.Background(), Config{})
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("Start = %v, want binaries not found", err)
	}
	if strings.Contains(err.Error(), parent) {
		t.Errorf("Start's error names a parent folder: %v", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("Start ran a binary planted in a parent folder")
	}
}

// Start refuses binaries in a folder, or binaries, that another user could have written, and
// runs none of them.
func TestStartRefusesUntrustedBinDir(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spoil  func(t *testing.T, dir string) string // returns the path the error must name
		reason string
	}{
		{"world-writable folder", func(t *testing.T, dir string) string {
			chmod(t, dir, 0o777)
			return dir
		}, "writable by its group or others"},
		{"group-writable folder", func(t *testing.T, dir string) string {
			chmod(t, dir, 0o775)
			return dir
		}, "writable by its group or others"},
		{"group-writable binary", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "kube-apiserver")
			chmod(t, p, 0o775)
			return p
		}, "writable by its group or others"},
		{"binary of another user", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "etcd")
			if err := os.Chown(p, 54321, -1); err != nil {
				t.Skipf("cannot give a file to another user here: %v", err)
			}
			return p
		}, "owned by uid 54321"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "bin")
			marker := filepath.Join(t.TempDir(), "ran")
			plantBinaries(t, dir, marker)
			chmod(t, dir, 0o755)
			path := tc.spoil(t, dir)
			for _, how := range []string{"BinDir", BinEnv} {
				cfg := Config{BinDir: dir}
				if how == BinEnv {
					cfg = Config{}
					t.Setenv(BinEnv, dir)
				}
				_, err := Start(context.Background(), cfg)
				var untrusted *UntrustedBinDirError
				if !errors.As(err, &untrusted) || untrusted.Path != path || !strings.Contains(err.Error(), tc.reason) {
					t.Errorf("with %s: Start = %v, want an UntrustedBinDirError for %s: %s", how, err, path, tc.reason)
				}
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("Start ran a binary from an untrusted folder")
			}
		})
	}
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
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
