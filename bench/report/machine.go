package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// machine describes where and when the suite ran. It is written to raw/machine.txt
// as "key: value" lines, so that -norun can regenerate the report.
type machine struct {
	cpu, goVersion, osArch, kernel string
	cores                          int
	date                           time.Time
	loadStart, loadEnd             string
	wall                           time.Duration
	phases                         []phaseTime
	note                           string // set for partial runs
}

// phaseTime is how long one phase took and whether it failed.
type phaseTime struct {
	name string
	d    time.Duration
	err  error
}

func probeMachine(ctx context.Context, now time.Time) *machine {
	m := &machine{cores: runtime.NumCPU(), date: now.UTC(), osArch: runtime.GOOS + "/" + runtime.GOARCH}
	m.cpu = cpuModel()
	if out, err := exec.CommandContext(ctx, "go", "env", "GOVERSION").Output(); err == nil {
		m.goVersion = strings.TrimSpace(string(out))
	}
	if out, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = strings.TrimSpace(string(out))
	}
	return m
}

// cpuModel returns the "model name" of /proc/cpuinfo, or "unknown".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// loadAvg returns the 1, 5 and 15 minute load averages of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func (m *machine) write(path string) error {
	var sb strings.Builder
	kv := func(k, v string) { fmt.Fprintf(&sb, "%s: %s\n", k, v) }
	kv("cpu", m.cpu)
	kv("cores", fmt.Sprint(m.cores))
	kv("go", m.goVersion)
	kv("os", m.osArch)
	kv("kernel", m.kernel)
	kv("date", m.date.Format(time.RFC3339))
	kv("load-start", m.loadStart)
	kv("load-end", m.loadEnd)
	kv("wall", m.wall.Round(time.Second).String())
	if m.note != "" {
		kv("note", m.note)
	}
	for _, p := range m.phases {
		st := "ok"
		if p.err != nil {
			st = "FAILED: " + strings.ReplaceAll(p.err.Error(), "\n", " ")
		}
		kv("phase", fmt.Sprintf("%s %s %s", p.name, p.d.Round(time.Second), st))
	}
	return os.WriteFile(path, []byte(sb.String()), 0o644)
}

// readMachine parses raw/machine.txt.
func readMachine(path string) (*machine, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := &machine{}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ": ")
		if !ok {
			continue
		}
		switch k {
		case "cpu":
			m.cpu = v
		case "cores":
			fmt.Sscan(v, &m.cores)
		case "go":
			m.goVersion = v
		case "os":
			m.osArch = v
		case "kernel":
			m.kernel = v
		case "date":
			m.date, _ = time.Parse(time.RFC3339, v)
		case "load-start":
			m.loadStart = v
		case "load-end":
			m.loadEnd = v
		case "wall":
			m.wall, _ = time.ParseDuration(v)
		case "note":
			m.note = v
		case "phase":
			f := strings.SplitN(v, " ", 3)
			if len(f) < 3 {
				continue
			}
			d, _ := time.ParseDuration(f[1])
			pt := phaseTime{name: f[0], d: d}
			if f[2] != "ok" {
				pt.err = fmt.Errorf("%s", strings.TrimPrefix(f[2], "FAILED: "))
			}
			m.phases = append(m.phases, pt)
		}
	}
	return m, nil
}
