package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/ctrlkit/ctrlkit/testenv/internal/cpbuild"
)

// buildPackage is the import path of the command that runs [Build].
const buildPackage = "github.com/ctrlkit/ctrlkit/testenv/cmd/controlplane"

// BuildEstimate is what Build tells its Progress writer to expect, measured on this project's
// 2-core machines.
const BuildEstimate = "a first build compiles about 2,300 packages and takes 3 to 20 minutes on 2 cores; " +
	"with a warm Go build cache, later builds only link, in about a minute"

// BuildConfig configures [Build]. The zero value builds with the go command on PATH into
// $CTRLKIT_CONTROLPLANE_BIN when it is set, else into [DefaultBinDir], and reports nothing.
type BuildConfig struct {
	// Dir is the folder that receives etcd and kube-apiserver; it is created if missing.
	// Empty means the folder named by $CTRLKIT_CONTROLPLANE_BIN when that is set, else
	// [DefaultBinDir].
	Dir string
	// Go is the go command to build with. Empty means "go" found on PATH, else the go
	// command in $GOROOT/bin, else the one of the Go installation that built the running
	// program.
	Go string
	// Progress receives lines saying what Build is doing: the estimate, the modules the go
	// command downloads, and every ProgressInterval the time spent and the packages compiled
	// against the number the go command planned. Nil discards them.
	Progress io.Writer
	// ProgressInterval is the time between two progress lines while the go command runs.
	// Zero means 15 seconds.
	ProgressInterval time.Duration
}

// BuildError is the error [Build] returns when the go command fails. Check for it with
// errors.As.
type BuildError struct {
	// Binary is the binary being built: "etcd" or "kube-apiserver".
	Binary string
	// Args are the go command's arguments.
	Args []string
	// Output holds the last lines the go command wrote.
	Output string
	// Err is the go command's error (an *exec.ExitError, say).
	Err error
}

func (e *BuildError) Error() string {
	return fmt.Sprintf("testenv: build %s: go %s: %v\n%s\n"+
		"(the first build downloads k8s.io/kubernetes, go.etcd.io/etcd and their dependencies: "+
		"it needs network access to the Go module proxy, GOPROXY, unless they are in the module cache)",
		e.Binary, strings.Join(e.Args, " "), e.Err, strings.TrimRight(e.Output, "\n"))
}

// Unwrap returns Err.
func (e *BuildError) Unwrap() error { return e.Err }

// DefaultBinDir returns the folder that [Build] fills by default and that [Start] uses when
// no folder is named: ctrlkit/controlplane/<CacheKey()> under the user's cache folder
// (os.UserCacheDir).
func DefaultBinDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("testenv: no user cache folder for the control plane: %w", err)
	}
	return filepath.Join(base, "ctrlkit", "controlplane", CacheKey()), nil
}

// Build builds etcd [EtcdVersion] and kube-apiserver [KubernetesVersion] from Go modules
// into a folder and returns the folder. It is a no-op when both binaries are there already.
//
// The two modules (a main package each, with a go.mod and go.sum that pin the versions) are
// part of ctrlkit's own module, so Build works wherever ctrlkit is a dependency: it writes
// them to a temporary folder and runs `go build -trimpath` in each, which shares the Go build
// cache (GOCACHE) and module cache (GOMODCACHE) of the go command. Each binary is written as
// <name>.<random>.partial and renamed into place when complete, so a folder never holds a
// half-written binary, and concurrent builds into one folder are harmless.
//
// The first build downloads the modules through the Go module proxy and takes a long time
// (see [BuildEstimate]); cfg.Progress hears how far it is. Cancelling ctx kills the go
// command and everything it started.
func Build(ctx context.Context, cfg BuildConfig) (string, error) {
	dir, err := buildDir(cfg.Dir)
	if err != nil {
		return "", err
	}
	p := progress{w: cfg.Progress}
	if p.w == nil {
		p.w = io.Discard
	}
	if haveBinaries(dir) {
		p.printf("testenv: etcd %s and kube-apiserver %s are in %s already", EtcdVersion, KubernetesVersion, dir)
		return dir, nil
	}
	b := &builder{progress: p, interval: cfg.ProgressInterval}
	if b.interval <= 0 {
		b.interval = 15 * time.Second
	}
	if b.goCmd, err = findGo(cfg.Go); err != nil {
		return "", err
	}
	_, statErr := os.Stat(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("testenv: create %s: %w", dir, err)
	}
	if errors.Is(statErr, fs.ErrNotExist) {
		// Start refuses a folder its group may write; a umask of 002 must not make the
		// folder Build creates unusable.
		if err := os.Chmod(dir, 0o755); err != nil {
			return "", fmt.Errorf("testenv: create %s: %w", dir, err)
		}
	}
	work, err := os.MkdirTemp("", "ctrlkit-controlplane-build-")
	if err != nil {
		return "", fmt.Errorf("testenv: create build folder: %w", err)
	}
	defer os.RemoveAll(work)

	start := time.Now()
	p.printf("testenv: building etcd %s and kube-apiserver %s into %s with %s", EtcdVersion, KubernetesVersion, dir, b.goCmd)
	p.printf("testenv: %s", BuildEstimate)
	for _, m := range cpbuild.Modules {
		target := filepath.Join(dir, m.Binary)
		if isExecutable(target) {
			p.printf("testenv: %s is there already", m.Binary)
			continue
		}
		src := filepath.Join(work, m.Binary)
		if err := m.Write(src); err != nil {
			return "", fmt.Errorf("testenv: %w", err)
		}
		if err := b.build(ctx, m, src, target); err != nil {
			return "", err
		}
	}
	p.printf("testenv: control plane built in %s (%s)", dir, time.Since(start).Round(time.Second))
	return dir, nil
}

// builder runs the go command for Build.
type builder struct {
	goCmd    string
	progress progress
	interval time.Duration
}

// build compiles module m, written to src, into target: first `go build -n` to learn how
// many packages need compiling (downloading modules as needed), then `go build -v`, whose
// lines name each package as it is compiled.
func (b *builder) build(ctx context.Context, m cpbuild.Module, src, target string) error {
	partial := fmt.Sprintf("%s.%s.partial", target, randomHex(4))
	defer os.Remove(partial) // gone already after the rename
	p := b.progress
	start := time.Now()
	p.printf("testenv: %s: planning the build of %s (the first time, the go command downloads the modules it needs now)", m.Binary, m.Description)
	planned := 0
	err := b.run(ctx, m.Binary, src, []string{"build", "-n", "-trimpath", "-o", partial, "."},
		func(line string) {
			if isCompileHeader(line) {
				planned++
			}
		},
		func(elapsed time.Duration) string {
			return fmt.Sprintf("%s: %s, still planning", m.Binary, elapsed)
		})
	if err != nil {
		return err
	}
	if planned == 0 {
		p.printf("testenv: %s: every package is in the Go build cache; linking", m.Binary)
	} else {
		p.printf("testenv: %s: %s to compile (the others are in the Go build cache)", m.Binary, packages(planned))
	}
	compiled := 0
	err = b.run(ctx, m.Binary, src, []string{"build", "-v", "-trimpath", "-o", partial, "."},
		func(line string) {
			if isImportPath(line) {
				compiled++
			}
		},
		func(elapsed time.Duration) string {
			if compiled < planned {
				return fmt.Sprintf("%s: %s, compiled %d of %d packages", m.Binary, elapsed, compiled, planned)
			}
			return fmt.Sprintf("%s: %s, compiled %s, linking", m.Binary, elapsed, packages(compiled))
		})
	if err != nil {
		return err
	}
	// The go command honours the umask; Start refuses a binary its group may write.
	if err := os.Chmod(partial, 0o755); err != nil {
		return fmt.Errorf("testenv: install %s: %w", m.Binary, err)
	}
	if err := os.Rename(partial, target); err != nil {
		return fmt.Errorf("testenv: install %s: %w", m.Binary, err)
	}
	p.printf("testenv: %s: built in %s", m.Binary, time.Since(start).Round(time.Second))
	return nil
}

// tailLines is how many of the go command's last lines a BuildError holds.
const tailLines = 40

// run runs the go command with args in dir. It hands each line of its output to line, passes
// "go: downloading" lines on to the progress writer, and writes status every interval until
// the command ends. The go command runs in a process group of its own, killed as a whole when
// ctx ends, so that no compiler outlives a cancelled build.
func (b *builder) run(ctx context.Context, binary, dir string, args []string, line func(string), status func(elapsed time.Duration) string) error {
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("testenv: build %s: %w", binary, err)
	}
	defer r.Close()
	cmd := exec.CommandContext(ctx, b.goCmd, args...)
	cmd.Dir = dir
	// The modules' own go.mod files rule: no workspace of the caller's applies.
	cmd.Env = append(os.Environ(), "GOWORK=off")
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	err = cmd.Start()
	w.Close() // the child holds its own copy; r ends when the last writer is gone
	if err != nil {
		return fmt.Errorf("testenv: build %s: run %s: %w", binary, b.goCmd, err)
	}

	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, r) // after an overlong line: keep the writer from blocking
	}()
	start := time.Now()
	tick := time.NewTicker(b.interval)
	defer tick.Stop()
	var tail []string
	for lines != nil {
		select {
		case l, ok := <-lines:
			if !ok {
				lines = nil
				continue
			}
			if len(tail) == tailLines {
				tail = tail[1:]
			}
			tail = append(tail, l)
			if strings.HasPrefix(l, "go: downloading ") {
				b.progress.printf("testenv: %s: %s", binary, l)
			}
			line(l)
		case <-tick.C:
			b.progress.printf("testenv: %s", status(time.Since(start).Round(time.Second)))
		}
	}
	if err := cmd.Wait(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("testenv: build %s: %w", binary, context.Cause(ctx))
		}
		return &BuildError{Binary: binary, Args: args, Output: strings.Join(tail, "\n"), Err: err}
	}
	return nil
}

// isCompileHeader reports whether line, from `go build -n`, starts the commands that
// compile one package: "# " and an import path.
func isCompileHeader(line string) bool {
	path, ok := strings.CutPrefix(line, "# ")
	return ok && isImportPath(path)
}

// isImportPath reports whether line, from `go build -v`, is the import path of a package
// being compiled, rather than a message or an error.
func isImportPath(line string) bool {
	return line != "" && !strings.ContainsAny(line, " \t:#") && !strings.HasPrefix(line, "-")
}

// packages returns "1 package" or "n packages".
func packages(n int) string {
	if n == 1 {
		return "1 package"
	}
	return fmt.Sprintf("%d packages", n)
}

// progress writes Build's progress lines. The zero value is not usable; w must be set.
type progress struct{ w io.Writer }

func (p progress) printf(format string, args ...any) {
	fmt.Fprintf(p.w, format+"\n", args...)
}

// buildDir returns the folder Build fills for the configured dir.
func buildDir(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	if env := os.Getenv(BinEnv); env != "" {
		return env, nil
	}
	return DefaultBinDir()
}

// findGo returns the go command to build with.
func findGo(configured string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	if path, err := exec.LookPath("go"); err == nil {
		return path, nil
	}
	for _, root := range []string{os.Getenv("GOROOT"), runtime.GOROOT()} {
		if path := filepath.Join(root, "bin", "go"); root != "" && isExecutable(path) {
			return path, nil
		}
	}
	return "", errors.New("testenv: no go command on PATH or in GOROOT; building etcd and kube-apiserver needs Go")
}

// haveBinaries reports whether dir holds both binaries.
func haveBinaries(dir string) bool {
	return isExecutable(filepath.Join(dir, "etcd")) && isExecutable(filepath.Join(dir, "kube-apiserver"))
}

// buildCommand returns the command line that builds the binaries into dir (the default folder
// when dir is empty): the command at the version of ctrlkit this program was built with, when
// that is a published version, so that it builds the versions this testenv expects.
func buildCommand(dir string) string {
	cmd := "go run " + buildPackage
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if m.Path == "github.com/ctrlkit/ctrlkit" && m.Replace == nil && strings.HasPrefix(m.Version, "v") {
				cmd += "@" + m.Version
			}
		}
	}
	if dir != "" {
		cmd += " -dir " + shellQuote(dir)
	}
	return cmd
}

// shellQuote quotes s for a POSIX shell when it holds anything but plain path characters.
func shellQuote(s string) string {
	if strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=,:@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
