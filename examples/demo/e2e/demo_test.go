//go:build e2e

// Package e2e runs the demo program as a user would: to the end, and interrupted with Ctrl-C
// (SIGINT) in the middle of its workload. Each run starts its own control plane.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
)

var demoBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ctrlkit-demo-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	demoBin = filepath.Join(dir, "demo")
	out, err := exec.Command("go", "build", "-o", demoBin, "github.com/ctrlkit/ctrlkit/examples/demo").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building the demo: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(leakcheck.Options()...); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

var pidLine = regexp.MustCompile(`etcd pid (\d+), kube-apiserver pid (\d+)`)

// controlPlanePIDs returns the PIDs the demo printed for its etcd and kube-apiserver.
func controlPlanePIDs(t *testing.T, out string) []int {
	t.Helper()
	m := pidLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the demo did not print its control plane's PIDs:\n%s", out)
	}
	var pids []int
	for _, s := range m[1:] {
		pid, _ := strconv.Atoi(s)
		pids = append(pids, pid)
	}
	return pids
}

// assertGone fails unless no process with these PIDs runs any more (a zombie counts as gone).
func assertGone(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		if fields := strings.Fields(string(stat)); len(fields) > 2 && fields[2] == "Z" {
			continue
		}
		t.Errorf("process %d still runs after the demo exited: %s", pid, stat)
	}
}

func TestDemoRunsToTheEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, demoBin, "-duration", "15s", "-rate", "20", "-seed", "7")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	s := out.String()
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`converged \S+ after the last write`),
		regexp.MustCompile(`sidecar-injector: \d+ Deployments; the \d+ that opt in carry envoyproxy/envoy:v1\.\d+\.0`),
		regexp.MustCompile(`network-controller: \d+ Networks; the backend holds exactly the \d+ valid ones`),
		regexp.MustCompile(`replicaset: \d+ PodSets own exactly the \d+ Pods they ask for`),
		regexp.MustCompile(`workload: [1-9]\d+ writes`),
		regexp.MustCompile(`podset +reconciles +[1-9]\d*`),
		regexp.MustCompile(`control plane stopped, temporary files removed`),
	} {
		if !want.MatchString(s) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	assertGone(t, controlPlanePIDs(t, s))
}

var replicaSummary = regexp.MustCompile(`(?m)^  (r\d)  reconciles (\d+)/(\d+)/(\d+) \(sidecar/network/podset\); (.*)$`)

// TestDemoReplicas runs the demo's controllers as three replicas of one sharded group,
// the last of which leaves half-way through: every replica reconciles part of the work,
// the two that stay take the third's slots, and at the end everything converged and each
// replica caches exactly the objects of its shard. Objects are placed by their key (a
// Pod by its controller's), which the server cannot filter by: the replicas filter what
// they receive.
func TestDemoReplicas(t *testing.T) {
	for _, tc := range []struct {
		name, filtered string
	}{
		{"by-name", "client"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, demoBin, "-replicas", "3", "-duration", "12s", "-rate", "20", "-seed", "11")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				t.Fatalf("demo: %v\n%s", err, out.String())
			}
			s := out.String()
			for _, want := range []*regexp.Regexp{
				regexp.MustCompile(`the 3 replicas \(Leases \S+\) split the hash space of 64 slots in \S+: r0 \d+ slots \(\S+%\), r1 \d+ slots \(\S+%\), r2 \d+ slots`),
				regexp.MustCompile(`(?m)^       r0 +\d+ slots +\S+% \| caches \d+ deploy, \d+ net, \d+ podset, \d+ pods \| reconciles/s \d+/\d+/\d+$`),
				regexp.MustCompile(`r2 left \(controllers drained, Lease deleted\) holding [1-9]\d* slots with .*; \S+ later the others held them: r0 \d+ slots \(\S+%\), r1 \d+ slots`),
				regexp.MustCompile(`(?m)^       r2 left at \d+s`),
				regexp.MustCompile(`converged \S+ after the last write`),
				regexp.MustCompile(`sidecar-injector: \d+ Deployments; the \d+ that opt in carry envoyproxy/envoy:v1\.\d+\.0`),
				regexp.MustCompile(`network-controller: \d+ Networks; the backend holds exactly the \d+ valid ones`),
				regexp.MustCompile(`replicaset: \d+ PodSets own exactly the \d+ Pods they ask for`),
				regexp.MustCompile(`sharding: each replica caches exactly the objects of its shard \(Deployments/Networks/PodSets/Pods\): r0 \d+/\d+/\d+/\d+, r1 \d+/\d+/\d+/\d+\n`),
				regexp.MustCompile(fmt.Sprintf(`filtered: deployments.apps %[1]s-side, networks.samplecrd.k8s.io %[1]s-side, podsets.examples.ctrlkit.dev %[1]s-side, pods client-side\)`, tc.filtered)),
				regexp.MustCompile(`control plane stopped, temporary files removed`),
			} {
				if !want.MatchString(s) {
					t.Errorf("output lacks %q:\n%s", want, s)
				}
			}
			// Each replica did part of the work; the two that stayed hold every slot, and
			// took some from the one that left, which gave all of its own up.
			rows := replicaSummary.FindAllStringSubmatch(s, -1)
			if len(rows) != 3 {
				t.Fatalf("the summary has %d replica lines, want 3:\n%s", len(rows), s)
			}
			atoi := func(s string) int { n, _ := strconv.Atoi(s); return n } // of \d+
			slots := 0
			for _, row := range rows {
				total := atoi(row[2]) + atoi(row[3]) + atoi(row[4])
				if total == 0 {
					t.Errorf("%s reconciled nothing: %s", row[1], row[0])
				}
				if row[1] == "r2" {
					if !regexp.MustCompile(`^left at \d+s with ([1-9]\d*) slots holding .*; hand-offs: took (\d+) slots \(\d+ at the start\), gave up (\d+)$`).MatchString(row[5]) {
						t.Errorf("r2 did not leave as expected: %s", row[0])
					}
					continue
				}
				m := regexp.MustCompile(`^at the end (\d+) slots .*; hand-offs: took (\d+) slots \((\d+) at the start\), gave up \d+$`).FindStringSubmatch(row[5])
				if m == nil {
					t.Errorf("%s: unexpected summary: %s", row[1], row[0])
					continue
				}
				slots += atoi(m[1])
				if atoi(m[2]) <= atoi(m[3]) {
					t.Errorf("%s took no slot after the start: %s", row[1], row[0])
				}
			}
			if slots != 64 {
				t.Errorf("r0 and r1 hold %d slots at the end, want all 64", slots)
			}
			assertGone(t, controlPlanePIDs(t, s))
		})
	}
}

func TestDemoStopsCleanlyOnInterrupt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, demoBin, "-duration", "10m")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Interrupt once the workload has run for a few seconds.
	var out strings.Builder
	r := bufio.NewReader(stdout)
	var progressLines int
	for progressLines < 1 {
		line, err := r.ReadString('\n')
		out.WriteString(line)
		if err != nil {
			cmd.Wait()
			t.Fatalf("demo ended before its workload ran: %v\n%s%s", err, out.String(), stderr.String())
		}
		if strings.HasPrefix(line, "[") && strings.Contains(line, "writes") {
			progressLines++
		}
	}
	interrupted := time.Now()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(r)
	out.Write(rest)
	err = cmd.Wait()
	took := time.Since(interrupted)
	s := out.String()
	if err != nil {
		t.Fatalf("demo exited with %v after SIGINT:\n%s%s", err, s, stderr.String())
	}
	if took > 30*time.Second {
		t.Errorf("demo took %v to stop after SIGINT", took)
	}
	for _, want := range []string{"interrupted; everything stopped", "control plane stopped, temporary files removed"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	assertGone(t, controlPlanePIDs(t, s))
}
