package reflector

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
)

// protoListWhole is the reference of protoListFrom: the list answer read
// whole, the envelope and the list message checked before any item is
// decoded (how FromREST read lists before it read them as a stream).
func (l *restLW[T, E]) protoListWhole(body []byte, lookup lookupFunc[T]) ([]T, []bool, []*RefusedError, metav1.ListMeta, error) {
	var lm metav1.ListMeta
	env, err := readEnvelope(body)
	if err != nil {
		return nil, nil, nil, lm, err
	}
	if string(env.kind) != l.kind+"List" {
		return nil, nil, nil, lm, l.wrongKind("the server sent", env.kind, l.kind+"List")
	}
	lb, err := readList(env.raw)
	if err != nil {
		return nil, nil, nil, lm, err
	}
	lm = metav1.ListMeta{
		ResourceVersion:    string(lb.resourceVersion),
		Continue:           string(lb.continueToken),
		RemainingItemCount: lb.remaining,
		ShardInfo:          lb.shardInfo,
	}
	items := []T{}
	var fromStore []bool
	if lookup != nil {
		fromStore = []bool{}
	}
	var refused []*RefusedError
	keys := keyReader[T]{lookup: lookup}
	var buf []byte
	for i, raw := range lb.items {
		if obj, ok := keys.find(raw); ok {
			items, fromStore = append(items, obj), append(fromStore, true)
			continue
		}
		obj, err := l.decode(raw, &buf)
		if err != nil {
			ref := protoRefusal(raw, err)
			if ref == nil {
				return nil, nil, nil, lm, fmt.Errorf("item %d: %w", i, err)
			}
			refused = append(refused, ref)
			continue
		}
		items = append(items, obj)
		if fromStore != nil {
			fromStore = append(fromStore, false)
		}
	}
	return items, fromStore, refused, lm, nil
}

// readList reads a list's message.
func readList(b []byte) (listBody, error) {
	var l listBody
	n := 0
	for c := b; len(c) > 0; {
		f, rest, err := nextField(c)
		if err != nil {
			return l, err
		}
		c = rest
		if f.num == 2 && f.typ == 2 {
			n++
		}
	}
	l.items = make([][]byte, 0, n)
	for len(b) > 0 {
		f, rest, _ := nextField(b) // checked above
		b = rest
		if f.typ != 2 {
			continue
		}
		switch f.num {
		case 1:
			if err := l.readListMeta(f.data); err != nil {
				return l, err
			}
		case 2:
			l.items = append(l.items, f.data)
		}
	}
	return l, nil
}

// FuzzProtoListStream: reading a list answer as a stream gives what reading
// it whole gives: the same items (decoded or taken from the store), the same
// refusals and metadata, and an error for the same inputs.
func FuzzProtoListStream(f *testing.F) {
	pb := apiruntime.ContentTypeProtobuf
	f.Add(encodeObject(pb, &corev1.ConfigMapList{
		ListMeta: metav1.ListMeta{ResourceVersion: "9", Continue: "token"},
		Items: []corev1.ConfigMap{
			{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "known", ResourceVersion: "5"}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "other", ResourceVersion: "6"}, Data: map[string]string{"a": "b"}},
		},
	}))
	f.Add(encodeObject(pb, &corev1.SecretList{Items: []corev1.Secret{{ObjectMeta: metav1.ObjectMeta{Name: "s"}}}}))
	f.Add([]byte("k8s\x00"))
	known := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "known", ResourceVersion: "5"}}
	lookup := func(ns, name, rv string) (*corev1.ConfigMap, bool) {
		return known, ns == "ns" && name == "known" && rv == "5"
	}
	lw := FromREST[*corev1.ConfigMap](fakeREST{}, "configmaps", "ns").(*restLW[*corev1.ConfigMap, corev1.ConfigMap])
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, lk := range []lookupFunc[*corev1.ConfigMap]{nil, lookup} {
			// A small buffer: fields cross the reader's refills.
			var stream, whole listRead[*corev1.ConfigMap]
			stream.items, stream.from, stream.refused, stream.lm, stream.err = lw.protoListFrom(bufio.NewReaderSize(bytes.NewReader(b), 16), lk)
			whole.items, whole.from, whole.refused, whole.lm, whole.err = lw.protoListWhole(b, lk)
			sameListRead(t, whole, stream, false)
		}
	})
}

// listRead is what a list reader returns.
type listRead[T any] struct {
	items   []T
	from    []bool
	refused []*RefusedError
	lm      metav1.ListMeta
	err     error
}

// sameListRead fails t unless a stream reader read what the whole-answer
// reader did: an error for the same answers, else the same items, the same
// of them from the store, the same refusals and the same list metadata. With
// stricter set, the stream reader may also refuse an answer the whole-answer
// reader read.
func sameListRead[T any](t *testing.T, whole, stream listRead[T], stricter bool) {
	t.Helper()
	if (stream.err == nil) != (whole.err == nil) && !(stricter && stream.err != nil) {
		t.Fatalf("stream: %v; whole: %v", stream.err, whole.err)
	}
	if stream.err != nil || whole.err != nil {
		return
	}
	if d := cmp.Diff(whole.items, stream.items); d != "" {
		t.Fatalf("items (-whole +stream):\n%s", d)
	}
	if d := cmp.Diff(whole.from, stream.from); d != "" {
		t.Fatalf("from the store (-whole +stream):\n%s", d)
	}
	if d := cmp.Diff(whole.lm, stream.lm); d != "" {
		t.Fatalf("list metadata (-whole +stream):\n%s", d)
	}
	if len(stream.refused) != len(whole.refused) {
		t.Fatalf("%d refused, whole %d", len(stream.refused), len(whole.refused))
	}
	for i := range stream.refused {
		if stream.refused[i].Key != whole.refused[i].Key || stream.refused[i].ResourceVersion != whole.refused[i].ResourceVersion {
			t.Fatalf("refused %d: %+v, whole %+v", i, stream.refused[i], whole.refused[i])
		}
	}
}

// TestListReadAsStream: a list of large objects is decoded as its answer
// arrives, one item's bytes at a time: the list allocates about what its
// objects hold, not also the whole answer and the copies of a buffer grown
// to hold it (which took it to more than twice the answer).
func TestListReadAsStream(t *testing.T) {
	const n, size = 20, 1 << 20
	list := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "7"}}
	for i := range n {
		list.Items = append(list.Items, corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprint("big-", i), ResourceVersion: "7"},
			Data:       map[string]string{"blob": string(bytes.Repeat([]byte{'a' + byte(i%26)}, size))},
		})
	}
	body := encodeObject(apiruntime.ContentTypeProtobuf, list)
	srv := serveChunked(apiruntime.ContentTypeProtobuf, body)
	defer srv.Close()
	lw := FromREST[*corev1.ConfigMap](restClient(t, srv.URL), "configmaps", "ns")
	var items []*corev1.ConfigMap
	var lm metav1.ListMeta
	var err error
	allocated := allocatedBy(func() { items, lm, err = lw.List(t.Context(), metav1.ListOptions{}) })
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != n || lm.ResourceVersion != "7" {
		t.Fatalf("%d items at %q, want %d at \"7\"", len(items), lm.ResourceVersion, n)
	}
	for i, cm := range items {
		if d := cmp.Diff(&list.Items[i], cm); d != "" {
			t.Fatalf("item %d (-sent +listed):\n%s", i, d)
		}
	}
	// The objects hold the answer's bytes once; one item's buffer and the
	// client's own allocations come on top.
	if limit := uint64(len(body)) * 13 / 10; allocated > limit {
		t.Errorf("the list of %d MB allocated %d MB, want at most %d MB", len(body)>>20, allocated>>20, limit>>20)
	}
}

// serveChunked serves body with the content type ct in chunks of 64 KB, as the
// API server streams a large list: no Content-Length.
func serveChunked(ct string, body []byte) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ct)
		for b := body; len(b) > 0; {
			k := min(len(b), 64<<10)
			w.Write(b[:k])
			w.(http.Flusher).Flush()
			b = b[k:]
		}
	}))
}

// allocatedBy returns the bytes the process allocated while f ran.
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
