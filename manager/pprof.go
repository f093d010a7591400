package manager

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"time"
)

// defaultProfileSeconds is the length of a CPU profile or trace when the
// request gives no ?seconds (bounded by HTTPConfig.MaxProfileDuration).
const defaultProfileSeconds = 30

// addPprof serves the runtime's profiles under /debug/pprof/ on mux, with
// runtime/pprof and runtime/trace alone (net/http/pprof would also register
// them on http.DefaultServeMux). A CPU profile or trace lasts at most limit.
func addPprof(mux *http.ServeMux, limit time.Duration) {
	mux.HandleFunc("/debug/pprof/", func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/debug/pprof/")
		if name == "" {
			var b strings.Builder
			b.WriteString("profile\ntrace\n")
			for _, p := range pprof.Profiles() {
				fmt.Fprintf(&b, "%s\n", p.Name())
			}
			writeText(w, http.StatusOK, b.String())
			return
		}
		p := pprof.Lookup(name)
		if p == nil {
			writeText(w, http.StatusNotFound, fmt.Sprintf("no profile %q\n", name))
			return
		}
		debug, _ := strconv.Atoi(r.URL.Query().Get("debug"))
		if debug > 0 {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		} else {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if name == "heap" && r.URL.Query().Get("gc") != "" {
			runtime.GC()
		}
		p.WriteTo(w, debug)
	})
	mux.HandleFunc("/debug/pprof/profile", func(w http.ResponseWriter, r *http.Request) {
		record(w, r, limit, "profile", pprof.StartCPUProfile, pprof.StopCPUProfile)
	})
	mux.HandleFunc("/debug/pprof/trace", func(w http.ResponseWriter, r *http.Request) {
		record(w, r, limit, "trace", trace.Start, trace.Stop)
	})
}

// record writes what start records to w for the ?seconds of r, at most limit,
// then calls stop. A client that goes away stops it early.
func record(w http.ResponseWriter, r *http.Request, limit time.Duration, name string, start func(w io.Writer) error, stop func()) {
	d, err := profileDuration(r.URL.Query().Get("seconds"), limit)
	if err != nil {
		writeText(w, http.StatusBadRequest, err.Error()+"\n")
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if err := start(w); err != nil {
		w.Header().Del("Content-Disposition")
		writeText(w, http.StatusInternalServerError, fmt.Sprintf("could not start the %s: %v\n", name, err))
		return
	}
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-r.Context().Done():
		t.Stop()
	}
	stop()
}

// profileDuration reads ?seconds: empty means defaultProfileSeconds (or limit
// if less); anything but a positive whole number, or more than limit, is an
// error.
func profileDuration(seconds string, limit time.Duration) (time.Duration, error) {
	maxSecs := int(limit / time.Second)
	if seconds == "" {
		return time.Duration(min(defaultProfileSeconds, maxSecs)) * time.Second, nil
	}
	n, err := strconv.Atoi(seconds)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("seconds=%q: want a positive whole number of seconds, at most %d", seconds, maxSecs)
	}
	if n > maxSecs {
		return 0, fmt.Errorf("seconds=%d: more than the maximum of %d", n, maxSecs)
	}
	return time.Duration(n) * time.Second, nil
}
