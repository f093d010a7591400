package reflector

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// countStore counts the events it is handed and signals when it has seen want.
type countStore struct {
	n    atomic.Int64
	want int64
	done chan struct{}
}

func (s *countStore) note() error {
	if s.n.Add(1) == s.want {
		close(s.done)
	}
	return nil
}
func (s *countStore) Add(*corev1.ConfigMap) error               { return s.note() }
func (s *countStore) Update(*corev1.ConfigMap) error            { return s.note() }
func (s *countStore) Delete(*corev1.ConfigMap) error            { return s.note() }
func (s *countStore) Replace([]*corev1.ConfigMap, string) error { return nil }

// BenchmarkFromRESTWatchBurst: a reflector through FromREST takes a burst of
// Modified events that reached the client together (one HTTP write of
// burstEvents protobuf frames) into a store that only counts them. ns/op and
// cpu-ns/op are per event; the server's encoding is done before the timer.
func BenchmarkFromRESTWatchBurst(b *testing.B) {
	const burstEvents = 20000
	pb := runtime.ContentTypeProtobuf
	events := make([]watch.Event, burstEvents)
	for i := range events {
		c := cm("ns", "cm-"+strconv.Itoa(i%1000))
		c.ResourceVersion = strconv.Itoa(10 + i)
		c.Data = map[string]string{"k": strconv.Itoa(i)}
		events[i] = watch.Event{Type: watch.Modified, Object: c}
	}
	body := encodeFrames(pb, events...)
	list := encodeObject(pb, &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "9"}})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", pb)
		if r.URL.Query().Get("watch") != "true" {
			w.Write(list)
			return
		}
		w.WriteHeader(http.StatusOK)
		w.Write(body)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	c, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, QPS: -1})
	if err != nil {
		b.Fatal(err)
	}
	lw := FromREST[*corev1.ConfigMap](c.CoreV1().RESTClient(), "configmaps", "ns")
	cpu0 := processCPU()
	b.ResetTimer()
	for range b.N {
		st := &countStore{want: burstEvents, done: make(chan struct{})}
		r := New(lw, st, Config[*corev1.ConfigMap]{WatchList: WatchListOff})
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan error, 1)
		go func() { ran <- r.Run(ctx) }()
		<-st.done
		cancel()
		if err := <-ran; err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*burstEvents), "ns/event")
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N*burstEvents), "cpu-ns/event")
}

// processCPU returns the process's CPU time so far, user and system, in
// nanoseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
