package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// process is one child process of the environment (etcd or kube-apiserver). It is started in
// a process group of its own, with a parent-death signal, so that it and anything it spawns
// die with the test binary even when the binary is killed without running Stop.
//
// A process is goroutine-safe. The zero value is not usable; fill name, path, args and logPath.
type process struct {
	name    string
	path    string
	args    []string
	logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd     // nil while stopped
	done chan struct{} // closed when cmd has been waited for; nil while stopped
}

// start launches the process. It does not wait for readiness.
func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("testenv: %s is already running", p.name)
	}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("testenv: open %s log: %w", p.name, err)
	}
	fmt.Fprintf(logFile, "\n===== testenv: starting %s at %s\n", p.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("testenv: start %s (%s): %w", p.name, p.path, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return nil
}

// exited reports whether a started process has already exited on its own.
func (p *process) exited() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// pid returns the process id, or 0 while stopped.
func (p *process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// stop sends sig to the whole process group and waits for the process to exit. After grace
// it escalates to SIGKILL. Stopping a stopped process is a no-op.
func (p *process) stop(sig syscall.Signal, grace time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd, p.done = nil, nil
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	pgid := cmd.Process.Pid
	_ = syscall.Kill(-pgid, sig)
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-done
	}
	// Children of the leader may outlive it briefly; the group is gone once kill fails.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return nil
}

// logTail returns the last n bytes of the process log, for error messages.
func (p *process) logTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// waitUntil polls ready every interval until it returns true, the process exits, or ctx ends.
func (p *process) waitUntil(ctx context.Context, interval time.Duration, ready func(context.Context) bool) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if ready(ctx) {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("testenv: %s exited during start-up; log tail:\n%s", p.name, p.logTail(4000))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testenv: %s not ready: %w; log tail:\n%s", p.name, context.Cause(ctx), p.logTail(4000))
		case <-t.C:
		}
	}
}
