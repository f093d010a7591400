package reflector

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzJSONListStream checks jsonListFrom, which reads a JSON list as it
// arrives, against jsonList, which read the whole answer first: they must
// accept the same answers and read the same items, list metadata and refusals
// from them.
func FuzzJSONListStream(f *testing.F) {
	items := `"items":[{"metadata":{"namespace":"ns","name":"known","resourceVersion":"5"},"spec":{"color":"red"}},` +
		`{"metadata":{"namespace":"ns","name":"b","resourceVersion":"4"},"spec":{"color":"blu\"e\\"}}]`
	for _, body := range []string{
		`{"kind":"FooList","apiVersion":"v1","metadata":{"resourceVersion":"9","continue":"c"},` + items + `}`,
		` {"kind":"FooList","items":null} `,
		`{"kind":"FooList","items":[]}`,
		`{"items":[{"metadata":{"name":"x"}}],"kind":"FooList"}`,
		`{"kind":"FooList","metadata":{},"metadata":{"resourceVersion":"9"},` + items + `}`,
		`{"\u006bind":"FooList","metadata":{"resourceVersion":"9"},` + items + `}`,
		`{"kind":"Foo\u004cist",` + items + `,"items":[]}`,
		`{"kind":"FooList","items":[7],` + items + `}`,
		`{"kind":"FooList","items":[{"metadata":{"name":"bad","resourceVersion":"1"},"spec":{"color":5}}]}`,
		`{"kind":"FooList","extra":[1,{"a":"]"}],` + items + `}`,
		`{"kind":"FooList","items":[{"metadata":{"name":"x"}}]} x`,
		`{"kind":"FooList","items":[{`,
		`[1,2]`,
		`{}`,
		`{"kind":"FooList","items":[1 2]}`,
		`{"kind":"FooList","extra":tru,"items":[]}`,
	} {
		f.Add([]byte(body))
	}
	known := &Foo{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "known", ResourceVersion: "5"}}
	lookup := func(ns, name, rv string) (*Foo, bool) {
		return known, ns == "ns" && name == "known" && rv == "5"
	}
	lw := FromJSON[*Foo](fakeREST{}, "foos", "ns").(*restLW[*Foo, Foo])
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, lk := range []lookupFunc[*Foo]{nil, lookup} {
			// A small buffer: values cross the reader's refills.
			var stream, whole listRead[*Foo]
			stream.items, stream.from, stream.refused, stream.lm, stream.err = lw.jsonListFrom(bufio.NewReaderSize(bytes.NewReader(b), 16), lk)
			whole.items, whole.from, whole.refused, whole.lm, whole.err = lw.jsonList(b, lk)
			// The whole-answer reader skipped the members it did not need
			// without checking them; the stream reader refuses a malformed
			// one, as decoding the list would.
			sameListRead(t, whole, stream, !json.Valid(b))
		}
	})
}

// TestJSONScanPieces: the end of a value is found wherever the pieces it
// arrives in are cut, escapes and brackets inside strings included.
func TestJSONScanPieces(t *testing.T) {
	for _, v := range []string{
		`"a"`, `""`, `"\\"`, `"\""`, `"\\\""`, `"a\\\\"`, `{"a":"}"}`, `[{"b":["]"]},"\\"]`, `{}`, `[]`,
		`123`, `true`, `null`, `{"a":"\u005c"}`,
	} {
		for cut := 1; cut <= len(v); cut++ {
			var sc jsonScan
			sc.scalar = v[0] != '"' && v[0] != '{' && v[0] != '['
			doc := v + `,"next"`
			got := -1
			for at := 0; at < len(doc); {
				end := min(at+cut, len(doc))
				n, done := sc.feed([]byte(doc[at:end]))
				if done {
					got = at + n
					break
				}
				at = end
			}
			if got != len(v) {
				t.Errorf("%s in pieces of %d: ends at %d, want %d", v, cut, got, len(v))
			}
		}
	}
}

// TestJSONListReadAsStream: a JSON list of large objects is decoded as its
// answer arrives, one item's bytes at a time, as a protobuf one is (see
// TestListReadAsStream); read whole first, the answer was also held at once,
// in a buffer grown by copying.
func TestJSONListReadAsStream(t *testing.T) {
	const n, size = 20, 1 << 20
	var body bytes.Buffer
	body.WriteString(`{"kind":"FooList","apiVersion":"example.com/v1","metadata":{"resourceVersion":"7"},"items":[`)
	for i := range n {
		if i > 0 {
			body.WriteByte(',')
		}
		fmt.Fprintf(&body, `{"metadata":{"namespace":"ns","name":"big-%d","resourceVersion":"7"},"spec":{"color":%q}}`,
			i, strings.Repeat(string(rune('a'+i%26)), size))
	}
	body.WriteString(`]}`)
	if !json.Valid(body.Bytes()) {
		t.Fatal("the test's list is not valid JSON")
	}
	srv := serveChunked("application/json", body.Bytes())
	defer srv.Close()
	lw := FromJSON[*Foo](restClient(t, srv.URL), "foos", "ns")
	var items []*Foo
	var lm metav1.ListMeta
	var err error
	allocated := allocatedBy(func() { items, lm, err = lw.List(t.Context(), metav1.ListOptions{}) })
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != n || lm.ResourceVersion != "7" {
		t.Fatalf("%d items at %q, want %d at \"7\"", len(items), lm.ResourceVersion, n)
	}
	for i, foo := range items {
		if foo.Name != fmt.Sprint("big-", i) || len(foo.Spec.Color) != size || foo.Spec.Color[0] != byte('a'+i%26) {
			t.Fatalf("item %d: %s with a color of %d bytes", i, foo.Name, len(foo.Spec.Color))
		}
	}
	if limit := uint64(body.Len()) * 13 / 10; allocated > limit {
		t.Errorf("the list of %d MB allocated %d MB, want at most %d MB", body.Len()>>20, allocated>>20, limit>>20)
	}
}
