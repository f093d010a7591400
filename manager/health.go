package manager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/ctrlkit/ctrlkit/reflector"
)

// check is one readiness check and, if it fails, why.
type check struct {
	name   string
	reason string // "" when it passes
}

// serveReadyz answers /readyz and /readyz/<check>. ctx is Run's: once it ends,
// the manager is stopping.
func (m *Manager) serveReadyz(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	standby := m.cfg.LeaderElection != nil && !m.Leading()
	checks := readinessChecks(ctx.Err() != nil, standby, m.Informers(), m.Controllers())
	m.logReadiness(checks)
	name := strings.TrimPrefix(r.URL.Path, "/readyz")
	if name == "" || name == "/" {
		_, verbose := r.URL.Query()["verbose"]
		code, body := readyzAnswer(checks, verbose)
		writeText(w, code, body)
		return
	}
	name = name[1:]
	for _, c := range checks {
		if c.name == name {
			code, body := readyzAnswer([]check{c}, false)
			writeText(w, code, body)
			return
		}
	}
	writeText(w, http.StatusNotFound, fmt.Sprintf("no readyz check %q\n", name))
}

// readinessChecks decides each check from the manager's state: stopping is true
// once Run is stopping, standby while a leader election is configured and this
// process does not lead. See HTTPConfig for the rules.
func readinessChecks(stopping, standby bool, infs []InformerStatus, ctls []ControllerStatus) []check {
	checks := make([]check, 0, 1+len(infs)+len(ctls))
	shutdown := check{name: "shutdown"}
	if stopping {
		shutdown.reason = "the manager is stopping"
	}
	checks = append(checks, shutdown)
	names := uniqueNames{}
	for _, inf := range infs {
		checks = append(checks, check{name: "informer/" + names.next(inf.Name), reason: informerNotReady(inf)})
	}
	names = uniqueNames{}
	for _, c := range ctls {
		checks = append(checks, check{name: "controller/" + names.next(c.Name), reason: controllerNotReady(c, standby)})
	}
	return checks
}

// informerNotReady says why inf is not ready, or "" if it is.
func informerNotReady(inf InformerStatus) string {
	h := inf.Health
	failing := h.ConsecutiveFailures > 0 && h.LastError != nil
	var access *reflector.AccessError
	refused := failing && errors.As(h.LastError, &access)
	if inf.Synced && !refused {
		return ""
	}
	var b strings.Builder
	if inf.Synced {
		b.WriteString("synced, but no longer kept up to date")
	} else {
		b.WriteString("not synced")
	}
	fmt.Fprintf(&b, " (%s", h.State)
	if failing {
		fmt.Fprintf(&b, ", %d consecutive failures", h.ConsecutiveFailures)
	}
	b.WriteString(")")
	if failing {
		switch {
		case errors.Is(h.LastError, reflector.ErrForbidden):
			b.WriteString(": forbidden")
		case errors.Is(h.LastError, reflector.ErrUnauthorized):
			b.WriteString(": unauthorized")
		}
		b.WriteString(": " + oneLine(h.LastError.Error()))
	}
	return b.String()
}

// controllerNotReady says why c is not ready, or "" if it is.
func controllerNotReady(c ControllerStatus, standby bool) string {
	switch c.State {
	case Running:
		if !c.Synced {
			return "running, sources not synced yet"
		}
		return ""
	case Waiting:
		if standby {
			return ""
		}
		return "not started yet"
	}
	if c.Err != nil {
		return "ended: " + oneLine(c.Err.Error())
	}
	return "ended"
}

// logReadiness logs the reason of each failing check the last probe did not
// find failing for that reason, and each check that passes again.
func (m *Manager) logReadiness(checks []check) {
	type change struct{ name, reason string }
	var changes []change
	m.srv.mu.Lock()
	prev := m.srv.failing
	now := make(map[string]string)
	for _, c := range checks {
		if c.reason != "" {
			now[c.name] = c.reason
		}
		if prev[c.name] != c.reason {
			changes = append(changes, change{c.name, c.reason})
		}
	}
	m.srv.failing = now
	m.srv.mu.Unlock()
	for _, c := range changes {
		if c.reason == "" {
			m.log.Info("readiness check passes", "check", c.name)
		} else {
			m.log.Info("readiness check fails", "check", c.name, "reason", c.reason)
		}
	}
}

// readyzAnswer is the status code and body of an answer listing checks. It
// names the failing checks, never their reasons.
func readyzAnswer(checks []check, verbose bool) (int, string) {
	failed := false
	for _, c := range checks {
		failed = failed || c.reason != ""
	}
	if !failed && !verbose {
		return http.StatusOK, "ok"
	}
	var b strings.Builder
	for _, c := range checks {
		switch {
		case c.reason != "":
			fmt.Fprintf(&b, "[-]%s failed\n", c.name)
		case verbose:
			fmt.Fprintf(&b, "[+]%s ok\n", c.name)
		}
	}
	if failed {
		b.WriteString("readyz check failed\n")
		return http.StatusServiceUnavailable, b.String()
	}
	b.WriteString("readyz check passed\n")
	return http.StatusOK, b.String()
}

// oneLine keeps a reason on one line of the answer.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// uniqueNames tells apart names that repeat: the second "x" is "x #2".
type uniqueNames map[string]int

func (u uniqueNames) next(name string) string {
	u[name]++
	if n := u[name]; n > 1 {
		return fmt.Sprintf("%s #%d", name, n)
	}
	return name
}
