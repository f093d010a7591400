package manager

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"

	"github.com/ctrlkit/ctrlkit/informer"
)

// The descriptors of the manager's own metrics; Manager.ControllerMetrics lists
// them.
var (
	informerLabels   = []string{"informer"}
	descSynced       = prometheus.NewDesc("ctrlkit_informer_synced", "1 once the informer has synced its first list, else 0.", informerLabels, nil)
	descObjects      = prometheus.NewDesc("ctrlkit_informer_objects", "Number of objects in the informer's cache.", informerLabels, nil)
	descRV           = prometheus.NewDesc("ctrlkit_informer_resource_version", "The resourceVersion the informer's cache reflects, as a number; absent when it is not a decimal number.", informerLabels, nil)
	descLists        = prometheus.NewDesc("ctrlkit_informer_lists_total", "Number of complete lists the informer stored, by mode: paginated LIST or streaming watch-list. The first list counts.", []string{"informer", "mode"}, nil)
	descExpired      = prometheus.NewDesc("ctrlkit_informer_expired_relists_total", "Number of relists forced by an expired or too large resourceVersion.", informerLabels, nil)
	descWatches      = prometheus.NewDesc("ctrlkit_informer_watches_total", "Number of watch requests the informer opened.", informerLabels, nil)
	descEvents       = prometheus.NewDesc("ctrlkit_informer_watch_events_total", "Number of Added, Modified and Deleted watch events the informer stored.", informerLabels, nil)
	descListed       = prometheus.NewDesc("ctrlkit_informer_listed_objects_total", "Number of objects the informer received while listing.", informerLabels, nil)
	descRefused      = prometheus.NewDesc("ctrlkit_informer_refused_objects_total", "Number of objects left out of the informer's cache because they could not be decoded or transformed.", informerLabels, nil)
	descFailures     = prometheus.NewDesc("ctrlkit_informer_failures_total", "Number of errors that made the informer back off.", informerLabels, nil)
	descConsecutive  = prometheus.NewDesc("ctrlkit_informer_consecutive_failures", "Number of failures since the informer last made progress; 0 when it is not failing.", informerLabels, nil)
	descHandlers     = prometheus.NewDesc("ctrlkit_informer_handlers", "Number of handlers registered on the informer.", informerLabels, nil)
	descBacklog      = prometheus.NewDesc("ctrlkit_informer_handler_backlog", "Number of changes waiting for the informer's handlers, summed over them.", informerLabels, nil)
	descLeader       = prometheus.NewDesc("ctrlkit_manager_leader", "1 while the manager's controllers may run: it holds the leader lease, or there is no leader election.", nil, nil)
	descShardInfo    = prometheus.NewDesc("ctrlkit_shard_info", "1 for this replica of a sharded group (Config.Sharding).", []string{"group", "identity", "field"}, nil)
	descShardMembers = prometheus.NewDesc("ctrlkit_shard_members", "Number of live replicas in the group, as last seen.", nil, nil)
	descShardSlots   = prometheus.NewDesc("ctrlkit_shard_slots", "Number of hash slots this replica holds.", nil, nil)
	descShardFrac    = prometheus.NewDesc("ctrlkit_shard_hash_fraction", "Share of the hash space this replica holds, 0 to 1.", nil, nil)
	descShardRange   = prometheus.NewDesc("ctrlkit_shard_range", "1 for each hash range [start, end) this replica holds (end 0x10000000000000000 is 2^64).", []string{"start", "end"}, nil)
	descHandoffs     = prometheus.NewDesc("ctrlkit_shard_handoffs_total", "Number of hash slots this replica took (granted) and gave up (revoked).", []string{"direction"}, nil)
	descKeysOwned    = prometheus.NewDesc("ctrlkit_shard_keys_owned", "Number of objects a sharded informer holds: this replica's share.", []string{"informer", "filtering"}, nil)
	errNotCollector  = errors.New("manager: a different collector of the same name is registered")
	restClientHooked sync.Once
)

// managerCollector is the prometheus.Collector of a manager's informer and
// leader series.
type managerCollector struct{ m *Manager }

// Describe implements prometheus.Collector.
func (c managerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSynced, descObjects, descRV, descLists, descExpired,
		descWatches, descEvents, descListed, descRefused, descFailures, descConsecutive,
		descHandlers, descBacklog, descLeader, descShardInfo, descShardMembers, descShardSlots, descShardFrac,
		descShardRange, descHandoffs, descKeysOwned} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c managerCollector) Collect(ch chan<- prometheus.Metric) {
	leader := 0.0
	if c.m.Leading() {
		leader = 1
	}
	ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, leader)
	c.collectShard(ch)
	names := uniqueNames{}
	for _, s := range c.m.informerSnapshots() {
		name := names.next(s.Name)
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, name)
		}
		counter := func(d *prometheus.Desc, v int64, extra ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{name}, extra...)...)
		}
		synced := 0.0
		if s.Synced {
			synced = 1
		}
		gauge(descSynced, synced)
		gauge(descObjects, float64(s.Objects))
		if rv, err := strconv.ParseUint(s.LastAppliedResourceVersion, 10, 64); err == nil {
			gauge(descRV, float64(rv))
		}
		st := s.Health.Stats
		counter(descLists, st.Lists, "paginated")
		counter(descLists, st.StreamingLists, "streaming")
		counter(descExpired, st.Expired)
		counter(descWatches, st.Watches)
		counter(descEvents, st.Events)
		counter(descListed, st.ListedObjects)
		counter(descRefused, st.Refused)
		counter(descFailures, st.Failures)
		gauge(descConsecutive, float64(s.Health.ConsecutiveFailures))
		gauge(descHandlers, float64(len(s.handlers)))
		backlog := 0
		for _, h := range s.handlers {
			backlog += h.Backlog
		}
		gauge(descBacklog, float64(backlog))
	}
}

// collectShard writes the shard series, with Config.Sharding.
func (c managerCollector) collectShard(ch chan<- prometheus.Metric) {
	st, ok := c.m.ShardStatus()
	if !ok {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(descShardInfo, 1, c.m.sharder.cfg.Group, st.Identity, c.m.sharder.cfg.Field)
	gauge(descShardMembers, float64(len(st.Members)))
	gauge(descShardSlots, float64(st.Slots))
	gauge(descShardFrac, st.Fraction)
	for _, r := range st.Held.Ranges {
		end := fmt.Sprintf("0x%016x", r.End)
		if r.End == 0 {
			end = "0x10000000000000000"
		}
		gauge(descShardRange, 1, fmt.Sprintf("0x%016x", r.Start), end)
	}
	ch <- prometheus.MustNewConstMetric(descHandoffs, prometheus.CounterValue, float64(st.Granted), "granted")
	ch <- prometheus.MustNewConstMetric(descHandoffs, prometheus.CounterValue, float64(st.Revoked), "revoked")
	c.m.mu.Lock()
	var sharded []*informerEntry
	for _, e := range c.m.order {
		if e.key.shard != Whole {
			sharded = append(sharded, e)
		}
	}
	c.m.mu.Unlock()
	names := uniqueNames{}
	for _, e := range sharded {
		mode := e.inf.Health().ShardFiltering
		if mode == "" {
			mode = "unknown"
		}
		gauge(descKeysOwned, float64(e.len()), names.next(e.inf.Name()), mode)
	}
}

// informerSnapshot is an informer's status and its handlers' counters.
type informerSnapshot struct {
	InformerStatus
	handlers []informer.HandlerStats
}

// informerSnapshots is Informers with the handlers' counters.
func (m *Manager) informerSnapshots() []informerSnapshot {
	m.mu.Lock()
	entries := make([]*informerEntry, len(m.order))
	copy(entries, m.order)
	m.mu.Unlock()
	out := make([]informerSnapshot, len(entries))
	for i, e := range entries {
		out[i].InformerStatus = InformerStatus{
			Name:                       e.inf.Name(),
			Synced:                     e.inf.HasSynced(),
			Health:                     e.inf.Health(),
			Objects:                    e.len(),
			LastAppliedResourceVersion: e.inf.LastAppliedResourceVersion(),
		}
		if h, ok := e.inf.(interface {
			HandlerStats() []informer.HandlerStats
		}); ok {
			out[i].handlers = h.HandlerStats()
		}
	}
	return out
}

// registerMetrics registers the manager's collectors and the REST client's on
// reg; on failure nothing of the manager's stays registered.
func (m *Manager) registerMetrics(reg *prometheus.Registry) error {
	if err := reg.Register(managerCollector{m}); err != nil {
		return fmt.Errorf("manager: register metrics: %w", err)
	}
	restClientHooked.Do(func() { hookRESTClient(m) })
	var added []prometheus.Collector
	for _, c := range []prometheus.Collector{restRequests, restLatency} {
		err := reg.Register(c)
		var dup prometheus.AlreadyRegisteredError
		switch {
		case err == nil:
			added = append(added, c)
			continue
		case errors.As(err, &dup) && dup.ExistingCollector == c:
			continue // another manager on the same registry
		case errors.As(err, &dup):
			err = errNotCollector
		}
		for _, a := range added {
			reg.Unregister(a)
		}
		reg.Unregister(managerCollector{m})
		return fmt.Errorf("manager: register REST client metrics: %w", err)
	}
	return nil
}

// The REST client collectors, one pair per process (see the metrics list).
var (
	restRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rest_client_requests_total",
		Help: "Number of HTTP requests of the process's Kubernetes REST clients, by status code, method and host.",
	}, []string{"code", "method", "host"})
	restLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "rest_client_request_duration_seconds",
		Help: "Latency in seconds of the process's Kubernetes REST client requests, by verb and host.",
		// 2ms to about a minute, doubling: a watch's latency is that of its
		// first answer, so long requests are rare.
		Buckets: prometheus.ExponentialBuckets(0.002, 2, 15),
	}, []string{"verb", "host"})
)

// restResults feeds rest_client_requests_total from client-go.
type restResults struct{}

// Increment implements clientmetrics.ResultMetric.
func (restResults) Increment(_ context.Context, code, method, host string) {
	restRequests.WithLabelValues(code, method, host).Inc()
}

// restLatencies feeds rest_client_request_duration_seconds from client-go.
type restLatencies struct{}

// Observe implements clientmetrics.LatencyMetric.
func (restLatencies) Observe(_ context.Context, verb string, u url.URL, latency time.Duration) {
	restLatency.WithLabelValues(verb, u.Host).Observe(latency.Seconds())
}

// hookRESTClient sets client-go's REST client hooks to feed the collectors,
// once per process; m only logs whether it worked.
func hookRESTClient(m *Manager) {
	clientmetrics.Register(clientmetrics.RegisterOpts{
		RequestResult:  restResults{},
		RequestLatency: restLatencies{},
	})
	if _, ours := clientmetrics.RequestResult.(restResults); !ours {
		m.log.Info("client-go's REST client metrics were set up by another library: rest_client_requests_total and rest_client_request_duration_seconds stay empty")
	}
}
