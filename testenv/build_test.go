package testenv

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctrlkit/ctrlkit/testenv/internal/cpbuild"
)

// The versions testenv names must be the ones the embedded modules and the Makefile build;
// otherwise Start would look in a folder that Build and `make controlplane` never fill.
func TestVersionsAgreeWithModulesAndMakefile(t *testing.T) {
	read := func(name string) []byte {
		t.Helper()
		for _, m := range cpbuild.Modules {
			if m.Binary == name {
				b, err := m.File("go.mod")
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
		}
		t.Fatalf("no embedded module builds %s", name)
		return nil
	}
	makefile, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		file    string
		content []byte
		pattern string
		want    string
	}{
		{"kube-apiserver go.mod", read("kube-apiserver"), `k8s\.io/kubernetes (v\S+)`, KubernetesVersion},
		{"etcd go.mod", read("etcd"), `go\.etcd\.io/etcd/server/v3 (v\S+)`, EtcdVersion},
		{"Makefile", makefile, `K8S_VERSION\s*:=\s*(v\S+)`, KubernetesVersion},
		{"Makefile", makefile, `ETCD_VERSION\s*:=\s*(v\S+)`, EtcdVersion},
	}
	for _, c := range checks {
		m := regexp.MustCompile(c.pattern).FindSubmatch(c.content)
		if m == nil {
			t.Fatalf("%s: no match for %s", c.file, c.pattern)
		}
		if got := string(m[1]); got != c.want {
			t.Errorf("%s pins %s, testenv expects %s", c.file, got, c.want)
		}
	}
	// Every staging module of the apiserver build must be pinned to the matching v0 version.
	staging := "v0" + strings.TrimPrefix(KubernetesVersion, "v1")
	replaced := regexp.MustCompile(`(k8s\.io/[\w-]+) => k8s\.io/[\w-]+ (v\S+)`).FindAllSubmatch(read("kube-apiserver"), -1)
	if len(replaced) < 20 {
		t.Fatalf("the kube-apiserver go.mod replaces %d staging modules, want them all", len(replaced))
	}
	for _, m := range replaced {
		if string(m[2]) != staging {
			t.Errorf("%s is replaced by %s, want %s", m[1], m[2], staging)
		}
	}
}

// The embedded modules are the only copy of the control plane's go.mod files: no folder of
// the repository is a module that builds etcd or kube-apiserver.
func TestNoOtherCopyOfTheControlPlaneModules(t *testing.T) {
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".cache") {
			return filepath.SkipDir
		}
		if d.Name() != "go.mod" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, dep := range []string{"k8s.io/kubernetes ", "go.etcd.io/etcd/server/v3 "} {
			if strings.Contains(string(b), dep) {
				t.Errorf("%s requires %s: the control plane's modules belong in testenv/internal/cpbuild only", path, dep)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// fakeGo writes a go command that pretends to build: `build -n` plans three packages,
// `build -v` names them one by one and writes the -o file. Every call appends its arguments,
// its working directory's module line and GOWORK to log. When block names a FIFO, `build -v`
// waits for a line on it after naming two packages; when fail is set, `build -v` fails.
func fakeGo(t *testing.T, log, block string, fail bool) string {
	t.Helper()
	script := `#!/bin/sh
echo "$* | $(head -1 go.mod) | GOWORK=$GOWORK" >>` + shellQuote(log) + `
out=
prev=
for a in "$@"; do
	[ "$prev" = -o ] && out=$a
	prev=$a
done
case " $* " in
*" -n "*)
	echo "go: downloading example.com/dep v1.2.3"
	echo "mkdir -p \$WORK/b001/"
	for p in example.com/dep/a example.com/dep/b example.com/main; do
		echo "#"
		echo "# $p"
		echo "#"
		echo "compile -o \$WORK/b001/_pkg_.a"
	done
	exit 0
	;;
esac
echo example.com/dep/a >&2
echo example.com/dep/b >&2
`
	if fail {
		script += "echo 'dep/b/b.go:3:1: syntax error: unexpected }' >&2\nexit 1\n"
	}
	if block != "" {
		script += "read line <" + shellQuote(block) + "\n"
	}
	script += `echo example.com/main >&2
printf '#!/bin/sh\n' >"$out"
chmod +x "$out"
`
	path := filepath.Join(t.TempDir(), "go")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// lineWriter hands each complete line written to it to f, under a lock.
type lineWriter struct {
	mu  sync.Mutex
	buf strings.Builder
	all strings.Builder
	f   func(line string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all.Write(p)
	w.buf.Write(p)
	for {
		s := w.buf.String()
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			break
		}
		w.buf.Reset()
		w.buf.WriteString(s[i+1:])
		if w.f != nil {
			w.f(s[:i])
		}
	}
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.all.String()
}

func readLog(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// TestBuildWritesBothBinariesThenIsANoOp: Build runs `go build -n` then `go build -v` with
// -trimpath in each embedded module, outside any workspace, installs both binaries without
// leaving partial files, and a second Build runs no go command at all.
func TestBuildWritesBothBinariesThenIsANoOp(t *testing.T) {
	log := filepath.Join(t.TempDir(), "log")
	dir := filepath.Join(t.TempDir(), "bin", "nested")
	var out lineWriter
	got, err := Build(t.Context(), BuildConfig{Dir: dir, Go: fakeGo(t, log, "", false), Progress: &out})
	if err != nil {
		t.Fatal(err)
	}
	if got != dir {
		t.Fatalf("Build returned %q, want %q", got, dir)
	}
	if !haveBinaries(dir) {
		t.Fatalf("%s lacks the binaries", dir)
	}
	if partial, _ := filepath.Glob(filepath.Join(dir, "*partial*")); len(partial) > 0 {
		t.Fatalf("partial files left behind: %v", partial)
	}
	calls := readLog(t, log)
	want := []*regexp.Regexp{
		regexp.MustCompile(`^build -n -trimpath -o ` + regexp.QuoteMeta(dir) + `/etcd\.\w+\.partial \. \| module \S+/etcd \| GOWORK=off$`),
		regexp.MustCompile(`^build -v -trimpath -o ` + regexp.QuoteMeta(dir) + `/etcd\.\w+\.partial \. \| module \S+/etcd \| GOWORK=off$`),
		regexp.MustCompile(`^build -n -trimpath -o ` + regexp.QuoteMeta(dir) + `/kube-apiserver\.\w+\.partial \. \| module \S+/kube-apiserver \| GOWORK=off$`),
		regexp.MustCompile(`^build -v -trimpath -o ` + regexp.QuoteMeta(dir) + `/kube-apiserver\.\w+\.partial \. \| module \S+/kube-apiserver \| GOWORK=off$`),
	}
	if len(calls) != len(want) {
		t.Fatalf("go was called %d times:\n%s", len(calls), strings.Join(calls, "\n"))
	}
	for i, re := range want {
		if !re.MatchString(calls[i]) {
			t.Errorf("call %d = %q, want %s", i, calls[i], re)
		}
	}
	for _, s := range []string{BuildEstimate, "etcd: go: downloading example.com/dep v1.2.3", "etcd: 3 packages to compile", "kube-apiserver: built in", "control plane built in " + dir} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("progress lacks %q:\n%s", s, out.String())
		}
	}

	var again lineWriter
	if got, err := Build(t.Context(), BuildConfig{Dir: dir, Go: fakeGo(t, log, "", false), Progress: &again}); err != nil || got != dir {
		t.Fatalf("second Build = %q, %v", got, err)
	}
	if n := len(readLog(t, log)); n != len(want) {
		t.Fatalf("the second Build ran go %d more times, want none", n-len(want))
	}
	if !strings.Contains(again.String(), "in "+dir+" already") {
		t.Errorf("second Build's progress does not say the binaries are there: %q", again.String())
	}
}

// TestBuildReportsCompiledPackagesWhileItRuns: while `go build -v` runs, Build reports the
// packages compiled so far against the number planned; the fake go command goes on only once
// that line has been written.
func TestBuildReportsCompiledPackagesWhileItRuns(t *testing.T) {
	tmp := t.TempDir()
	fifo := filepath.Join(tmp, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	released := map[string]bool{}
	out := lineWriter{f: func(line string) {
		for _, bin := range []string{"etcd", "kube-apiserver"} {
			if strings.HasPrefix(line, "testenv: "+bin+": ") && strings.HasSuffix(line, ", compiled 2 of 3 packages") && !released[bin] {
				released[bin] = true
				f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
				if err != nil {
					t.Error(err)
					return
				}
				f.WriteString("go on\n")
				f.Close()
			}
		}
	}}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dir := filepath.Join(tmp, "bin")
	if _, err := Build(ctx, BuildConfig{Dir: dir, Go: fakeGo(t, filepath.Join(tmp, "log"), fifo, false), Progress: &out, ProgressInterval: time.Millisecond}); err != nil {
		t.Fatalf("Build: %v\nprogress:\n%s", err, out.String())
	}
	if !released["etcd"] || !released["kube-apiserver"] {
		t.Fatalf("no progress line with the compiled count for both binaries:\n%s", out.String())
	}
	if !haveBinaries(dir) {
		t.Fatalf("%s lacks the binaries", dir)
	}
}

// TestBuildFailureIsABuildError: a failing go command gives a *BuildError holding its last
// lines and the hint about the module proxy; nothing is installed and no partial file stays.
func TestBuildFailureIsABuildError(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "bin")
	_, err := Build(t.Context(), BuildConfig{Dir: dir, Go: fakeGo(t, filepath.Join(tmp, "log"), "", true)})
	var be *BuildError
	if !errors.As(err, &be) {
		t.Fatalf("Build = %v, want a *BuildError", err)
	}
	if be.Binary != "etcd" || !strings.Contains(be.Output, "syntax error: unexpected }") || be.Args[0] != "build" {
		t.Errorf("BuildError = %+v", be)
	}
	for _, s := range []string{"testenv: build etcd", "syntax error", "Go module proxy"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error lacks %q: %v", s, err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("a failed build left %v in %s", entries, dir)
	}
}

// TestBuildCancelKillsEverythingItStarted: cancelling ctx while the go command runs ends
// Build with the context's cause, and the go command's own children are gone by then.
func TestBuildCancelKillsEverythingItStarted(t *testing.T) {
	tmp := t.TempDir()
	pidFile := filepath.Join(tmp, "child.pid")
	script := `#!/bin/sh
case " $* " in *" -n "*) echo "# example.com/a"; exit 0;; esac
sleep 1000 &
echo $! >` + shellQuote(pidFile) + `
echo example.com/started >&2
wait
`
	goCmd := filepath.Join(tmp, "go")
	if err := os.WriteFile(goCmd, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	stop := errors.New("stop now")
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	out := lineWriter{f: func(line string) {
		if strings.Contains(line, "compiled 1 package") {
			cancel(stop)
		}
	}}
	done := make(chan error, 1)
	go func() {
		_, err := Build(ctx, BuildConfig{Dir: filepath.Join(tmp, "bin"), Go: goCmd, Progress: &out, ProgressInterval: time.Millisecond})
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("Build did not return within a minute of the cancel: a child of the go command still holds its output")
	}
	if !errors.Is(err, stop) {
		t.Fatalf("Build = %v, want the cancel cause", err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	// Build returns once the output pipe is closed, which the child holds until it dies: it
	// is gone, or a zombie waiting to be reaped, or about to be one (a killed process closes
	// its files before its state turns to zombie, so it may still show as running for a
	// moment). A child that was not killed sleeps on.
	var stat string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return // gone
		}
		stat = string(b)
		if i := strings.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the go command's child %d still runs 10 s after Build returned: %s", pid, stat)
		}
	}
}

func TestBuildDirDefaults(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("HOME", cache)
	t.Setenv(BinEnv, "")
	want := filepath.Join(cache, "ctrlkit", "controlplane", CacheKey())
	if d, err := DefaultBinDir(); err != nil || d != want {
		t.Fatalf("DefaultBinDir = %q, %v, want %q", d, err, want)
	}
	if d, _ := buildDir(""); d != want {
		t.Errorf("buildDir without %s = %q, want %q", BinEnv, d, want)
	}
	if d, _ := buildDir("/x"); d != "/x" {
		t.Errorf("buildDir(/x) = %q", d)
	}
	t.Setenv(BinEnv, "/from/env")
	if d, _ := buildDir(""); d != "/from/env" {
		t.Errorf("buildDir with %s set = %q, want it", BinEnv, d)
	}
}

// TestStartFindsBinariesInDefaultBinDir: outside the repository and with no folder named,
// Start uses the binaries Build puts in DefaultBinDir (fake ones here, which fail at once).
func TestStartFindsBinariesInDefaultBinDir(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv(BinEnv, "")
	t.Chdir(t.TempDir())
	dir, err := DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"etcd", "kube-apiserver"} {
		script := "#!/bin/sh\necho \"" + name + " from the user cache\" >&2\nexit 3\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_, err = Start(t.Context(), Config{})
	if err == nil || !strings.Contains(err.Error(), "etcd from the user cache") {
		t.Fatalf("Start = %v, want it to run the etcd in %s", err, dir)
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/a/b-c_d.e":   "/a/b-c_d.e",
		"/a b":         "'/a b'",
		"/it's":        `'/it'\''s'`,
		"/x/$HOME/`y`": "'/x/$HOME/`y`'",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %q, want %q", in, got, want)
		}
	}
}
