package faultproxy

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// protoMagic starts every object kube-apiserver encodes in protobuf; a runtime.Unknown
// follows it.
var protoMagic = []byte("k8s\x00")

// observe records a resourceVersion the proxy forwarded for key.
func (p *Proxy) observe(key, rv string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resourceLocked(key).observe(rv, time.Now())
}

// observe inserts rv into the history in resourceVersion order, unless it is there
// already or is not a resourceVersion the API server could have issued. Requires
// Proxy.mu held.
func (r *resource) observe(rv string, at time.Time) {
	i, found, ok := searchRV(r.history, rv)
	if !ok || found {
		return
	}
	r.history = slices.Insert(r.history, i, seen{at: at, rv: rv})
	if len(r.history) > historyLimit {
		r.history = slices.Delete(r.history, 0, len(r.history)-historyLimit)
	}
}

// searchRV returns where rv belongs in h, whether it is there, and false when rv is not
// well formed.
func searchRV(h []seen, rv string) (int, bool, bool) {
	if _, err := resourceversion.CompareResourceVersion(rv, rv); err != nil {
		return 0, false, false
	}
	i, found := slices.BinarySearchFunc(h, rv, func(s seen, rv string) int {
		c, _ := resourceversion.CompareResourceVersion(s.rv, rv) // both well formed
		return c
	})
	return i, found, true
}

// pickStale chooses the resourceVersion a stale LIST is served from, or false when the
// history holds none that fits.
func pickStale(h []seen, s Stale, now time.Time) (string, bool) {
	if s.Versions > 0 {
		if len(h) <= s.Versions {
			return "", false
		}
		return h[len(h)-1-s.Versions].rv, true
	}
	for i := len(h) - 1; i >= 0; i-- {
		if !h[i].at.After(now.Add(-s.By)) {
			return h[i].rv, true
		}
	}
	return "", false
}

// listRV reads the resourceVersion of a LIST answer.
func listRV(contentType string, body []byte) (string, bool) {
	if isProto(contentType) {
		raw, ok := unwrapProto(body)
		if !ok {
			return "", false
		}
		var l metav1.PartialObjectMetadataList // every list has its ListMeta as field 1
		if l.Unmarshal(raw) != nil {
			return "", false
		}
		return l.ResourceVersion, l.ResourceVersion != ""
	}
	var l struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if json.Unmarshal(body, &l) != nil {
		return "", false
	}
	return l.Metadata.ResourceVersion, l.Metadata.ResourceVersion != ""
}

func isProto(contentType string) bool {
	return strings.HasPrefix(contentType, "application/vnd.kubernetes.protobuf")
}

// unwrapProto returns the message inside a "k8s\x00"-prefixed runtime.Unknown.
func unwrapProto(b []byte) ([]byte, bool) {
	if !bytes.HasPrefix(b, protoMagic) {
		return nil, false
	}
	var u runtime.Unknown
	if u.Unmarshal(b[len(protoMagic):]) != nil {
		return nil, false
	}
	return u.Raw, true
}

// jsonEventRV reads the resourceVersion of the object of a JSON watch event; an ERROR
// event's Status has none.
func jsonEventRV(frame []byte) (string, bool) {
	var e struct {
		Type   string `json:"type"`
		Object struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		} `json:"object"`
	}
	if json.Unmarshal(frame, &e) != nil || e.Type == "ERROR" {
		return "", false
	}
	return e.Object.Metadata.ResourceVersion, e.Object.Metadata.ResourceVersion != ""
}

// protoEventRV reads the resourceVersion of the object of a length-prefixed protobuf
// watch event: a metav1.WatchEvent, bare or inside a "k8s\x00" envelope, whose object
// is an enveloped object with its ObjectMeta as field 1.
func protoEventRV(frame []byte) (string, bool) {
	msg := frame[4:]
	if raw, ok := unwrapProto(msg); ok {
		msg = raw
	}
	var e metav1.WatchEvent
	if e.Unmarshal(msg) != nil || e.Type == "ERROR" {
		return "", false
	}
	raw, ok := unwrapProto(e.Object.Raw)
	if !ok {
		return "", false
	}
	var o metav1.PartialObjectMetadata
	if o.Unmarshal(raw) != nil {
		return "", false
	}
	return o.ResourceVersion, o.ResourceVersion != ""
}
