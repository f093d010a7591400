package reflector

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// JSONObject is the constraint of FromJSON: a pointer to a Go struct that
// the API server's JSON decodes into with encoding/json's rules and the
// struct's json tags, such as a custom resource's type written by hand:
//
//	type Foo struct {
//		metav1.TypeMeta   `json:",inline"`
//		metav1.ObjectMeta `json:"metadata,omitempty"`
//		Spec   FooSpec   `json:"spec"`
//		Status FooStatus `json:"status,omitempty"`
//	}
//
// *Foo needs a DeepCopyObject method to be a runtime.Object; the rest comes
// from the embedded TypeMeta and ObjectMeta.
type JSONObject[E any] interface {
	*E
	Object
}

// ProtoObject is the constraint of FromREST: a pointer to a generated API
// type that decodes its own protobuf message, as every type of k8s.io/api
// does. Unmarshal must not keep a reference to data (generated code copies
// what it decodes).
type ProtoObject[E any] interface {
	*E
	Object
	Unmarshal(data []byte) error
}

// FromREST lists and watches a collection of a built-in type through a REST
// client, reading the server's protobuf responses itself:
//
//	lw := reflector.FromREST[*corev1.ConfigMap](client.CoreV1().RESTClient(), "configmaps", namespace)
//
// resource is the collection's plural name and namespace "" means every
// namespace (or a cluster-scoped resource). c must be the REST client of
// T's API group and version, such as a clientset's CoreV1().RESTClient().
// The server's kind must be the name of T's element type (ConfigMap for
// *corev1.ConfigMap); an answer of another kind is an error.
//
// What it adds to FromTyped: each object is decoded into its own
// allocation, watch frames are read into one reused buffer, and, under a
// Reflector whose store implements ReuseKeyStore (the informer's does), the
// objects of a list that the store already holds at the same
// resourceVersion are not decoded at all: their namespace, name and
// resourceVersion are read from the wire and the store's instance is listed
// instead. A relist of a mostly unchanged collection then allocates little
// more than the changed objects. Watch events after the initial list are
// decoded as usual.
//
// It asks for protobuf and accepts JSON; a JSON answer (from a server that
// has no protobuf form for the type) is read as FromJSON reads it, with the
// same reuse of the store's objects. Requests go
// through c, so authentication, retries and error decoding are c's; watch
// requests are not rate limited. A malformed response is reported as an
// error (on a watch, an Error event with an internal-error Status that ends
// the stream), never a panic. Each watch runs one goroutine that reads the
// stream; it ends when the watch is stopped, its context is done or the
// stream ends. The ListerWatcher is safe for concurrent use.
func FromREST[T ProtoObject[E], E any](c rest.Interface, resource, namespace string) ListerWatcher[T] {
	l := newRESTLW[T]("FromREST", c, resource, namespace)
	l.accept = acceptProtobuf
	l.unmarshal = func(raw []byte) (T, error) {
		obj := T(new(E))
		return obj, obj.Unmarshal(raw)
	}
	return l
}

// FromJSON lists and watches a collection through a REST client, decoding
// the server's JSON into T: the ListerWatcher of a custom resource whose Go
// type is written by hand, with no generated client, clientset or protobuf
// code. Given a type Foo of the API group example.com/v1 (see JSONObject):
//
//	client, err := reflector.JSONClient(cfg, schema.GroupVersion{Group: "example.com", Version: "v1"})
//	...
//	lw := reflector.FromJSON[*Foo](client, "foos", namespace)
//
// resource is the collection's plural name and namespace "" means every
// namespace (or a cluster-scoped resource). c must be a REST client of the
// resource's API group and version whose serializer decodes a JSON
// metav1.Status (so that error answers become *apierrors.StatusError):
// JSONClient makes one from a rest.Config. Any other will do, such as
// rest.RESTClientFor with GroupVersion set, APIPath "/apis" ("/api" for the
// core group) and NegotiatedSerializer scheme.Codecs.WithoutConversion()
// from k8s.io/client-go/kubernetes/scheme.
//
// The server's kind must be the name of T's element type: Foo for *Foo,
// FooList for its lists (a CRD's default listKind). A type named otherwise
// than its kind is refused: each object of another kind is an error naming
// both. Like FromREST (and client-go's typed clients), it leaves each
// object's TypeMeta empty.
//
// It asks for JSON only and offers everything FromREST does. Each object
// is decoded into its own allocation. Under a Reflector whose store
// implements ReuseKeyStore, a listed object (a list item, or an event of a
// streaming list's initial events) that the store holds at the same
// resourceVersion is not decoded: its kind, namespace, name and
// resourceVersion are read on their own, a few short strings instead of
// the whole object, and the store's instance is listed instead. Watch
// events after the initial list are decoded as usual. An object that
// cannot be decoded but whose key can be read is refused on its own (see
// RefusedError). A malformed response is an error, never a panic. Watch
// requests are not rate limited. Each watch runs one goroutine that ends
// when the watch is stopped, its context is done or the stream ends. The
// ListerWatcher is safe for concurrent use.
func FromJSON[T JSONObject[E], E any](c rest.Interface, resource, namespace string) ListerWatcher[T] {
	l := newRESTLW[T]("FromJSON", c, resource, namespace)
	l.accept = runtime.ContentTypeJSON
	return l
}

// JSONClient returns a REST client of the API group version gv, for
// FromJSON: a copy of cfg rooted at /apis/<group>/<version> (/api/v1 for
// the core group, whose Group is ""), asking for JSON and decoding error
// answers into *apierrors.StatusError, rate limited by cfg's QPS and Burst.
// cfg is not changed. gv.Version must be set.
func JSONClient(cfg *rest.Config, gv schema.GroupVersion) (rest.Interface, error) {
	switch {
	case cfg == nil:
		return nil, errors.New("reflector: JSONClient was given a nil config")
	case gv.Version == "":
		return nil, fmt.Errorf("reflector: JSONClient was given the group version %q, with no version", gv)
	}
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	if gv.Group == "" {
		c.APIPath = "/api"
	}
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	c.NegotiatedSerializer = statusCodecs
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	client, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("reflector: JSONClient for %s: %w", gv, err)
	}
	return client, nil
}

// statusCodecs decode what a REST client decodes itself when it reads the
// answers as raw bytes: the metav1.Status of an error answer.
var statusCodecs = func() runtime.NegotiatedSerializer {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return serializer.NewCodecFactory(s).WithoutConversion()
}()

func newRESTLW[T JSONObject[E], E any](ctor string, c rest.Interface, resource, namespace string) *restLW[T, E] {
	l := &restLW[T, E]{c: c, resource: resource, namespace: namespace, kind: reflect.TypeFor[E]().Name(), goType: reflect.TypeFor[E]().String()}
	switch {
	case isNil(c):
		l.err = fmt.Errorf("reflector: %s was given a nil REST client", ctor)
	case resource == "":
		l.err = fmt.Errorf("reflector: %s was given an empty resource name", ctor)
	}
	return l
}

// restLW is the ListerWatcher of FromREST and FromJSON. It is immutable and
// safe for concurrent use.
type restLW[T JSONObject[E], E any] struct {
	c                   rest.Interface
	resource, namespace string
	kind                string // the kind of T, for checking answers
	goType              string // T's element type, for error messages
	accept              string // the Accept header of every request
	// unmarshal decodes an object's protobuf message into a new T; nil
	// when only JSON is accepted (FromJSON). Chosen once, it spares the
	// protobuf path any check of the format.
	unmarshal func(raw []byte) (T, error)
	// noManagedFields is set by withoutManagedFields: objects are decoded
	// without their managedFields.
	noManagedFields bool
	// err, when set, is what every List and Watch returns: the
	// constructor's arguments were unusable.
	err error
}

// wrongKind is the error for an answer of kind got where want (T's kind,
// or T's kind and "List") was expected; what says how it came.
func (l *restLW[T, E]) wrongKind(what string, got []byte, want string) error {
	return fmt.Errorf("%s a %q, want a %s (the kind is the name of the Go type %s)", what, got, want, l.goType)
}

// lookupFunc returns the store's instance of namespace/name at exactly
// resourceVersion. It may be called from any goroutine.
type lookupFunc[T any] func(namespace, name, resourceVersion string) (T, bool)

// reusingLister is implemented by ListerWatchers that can skip decoding the
// listed objects a store already holds: FromREST's. For every listed
// object (list items, and the Added and Modified events before the end of a
// streaming list's initial events) whose namespace, name and
// resourceVersion lookup knows, they hand over what lookup returned instead
// of decoding it: in the list, with fromStore[i] set; in the stream, as an
// event whose object is a *storedObject.
//
// They also name what they cannot decode: a listed item whose key and
// resourceVersion can be read although the item cannot be decoded is left out
// of items and returned in refused; such an object in a watch stream comes as
// an event whose object is an *undecodable. lookup may be nil.
//
// The watch of watchReusing is the reflector's own: it may hand over several
// events at once, as one Added event whose object is an *eventBatch. While the
// initial events of a streaming list come in, a batch holds Added events only;
// after them, Added, Modified, Deleted and Bookmark events.
type reusingLister[T Object] interface {
	listReusing(ctx context.Context, opts metav1.ListOptions, lookup lookupFunc[T]) (items []T, fromStore []bool, refused []*RefusedError, lm metav1.ListMeta, err error)
	watchReusing(ctx context.Context, opts metav1.ListOptions, lookup lookupFunc[T]) (watch.Interface, error)
}

// storedObject is the object of a watch event that a reusingLister took
// from the store instead of decoding it: the store's own instance, already
// transformed, not to be changed.
type storedObject[T Object] struct{ obj T }

func (s *storedObject[T]) GetObjectKind() schema.ObjectKind { return s.obj.GetObjectKind() }
func (s *storedObject[T]) DeepCopyObject() runtime.Object {
	c, _ := s.obj.DeepCopyObject().(T)
	return &storedObject[T]{c}
}

// eventBatch is the object of an event that carries several events of the
// reflector's own watch (see reusingLister), each with a decoded T or a
// *storedObject. The reader calls release once it is done with the events.
type eventBatch struct {
	events []watch.Event
	free   chan []watch.Event // where release returns events for reuse, if it has room
}

func (b *eventBatch) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (b *eventBatch) DeepCopyObject() runtime.Object {
	c := &eventBatch{events: make([]watch.Event, len(b.events))}
	for i, e := range b.events {
		c.events[i] = watch.Event{Type: e.Type, Object: e.Object.DeepCopyObject()}
	}
	return c
}

// release hands the events back to the watch, which reuses their slice for a
// later batch.
func (b *eventBatch) release() {
	if b.free == nil {
		return
	}
	clear(b.events)
	select {
	case b.free <- b.events[:0]:
	default:
	}
	b.events = nil
}

// batchMax is the most events an *eventBatch carries. An event waits in a batch
// at most while the ones read with it are decoded: batchMax of them, well under
// a millisecond.
const batchMax = 64

const acceptProtobuf = runtime.ContentTypeProtobuf + ", " + runtime.ContentTypeJSON

// listParams encodes ListOptions as query parameters, which every API group
// reads the same way.
var (
	paramsVersion = schema.GroupVersion{Version: "v1"}
	listParams    = func() runtime.ParameterCodec {
		s := runtime.NewScheme()
		metav1.AddToGroupVersion(s, paramsVersion)
		return runtime.NewParameterCodec(s)
	}()
)

func (l *restLW[T, E]) request(opts metav1.ListOptions) *rest.Request {
	return l.c.Get().
		Namespace(l.namespace).
		Resource(l.resource).
		SpecificallyVersionedParams(&opts, listParams, paramsVersion).
		SetHeader("Accept", l.accept)
}

// List lists one page. An item that cannot be decoded fails the whole page;
// under a Reflector, only that item is refused (see RefusedError).
func (l *restLW[T, E]) List(ctx context.Context, opts metav1.ListOptions) ([]T, metav1.ListMeta, error) {
	items, _, refused, lm, err := l.list(ctx, opts, nil)
	if err == nil && len(refused) > 0 {
		r := refused[0]
		return nil, metav1.ListMeta{}, fmt.Errorf("reflector: list of %s: item %s: %w", l.resource, r.Key, r.Err)
	}
	return items, lm, err
}

func (l *restLW[T, E]) listReusing(ctx context.Context, opts metav1.ListOptions, lookup lookupFunc[T]) ([]T, []bool, []*RefusedError, metav1.ListMeta, error) {
	return l.list(ctx, opts, lookup)
}

func (l *restLW[T, E]) list(ctx context.Context, opts metav1.ListOptions, lookup lookupFunc[T]) ([]T, []bool, []*RefusedError, metav1.ListMeta, error) {
	if l.err != nil {
		return nil, nil, nil, metav1.ListMeta{}, l.err
	}
	opts.Watch = false
	// The answer is read as it arrives rather than whole (Do reads it into a
	// buffer that grows by copying): a list is decoded one item at a time (see
	// protoListFrom and jsonListFrom). Its content type is told by its first bytes,
	// as a stream's answer headers are not at hand: a protobuf body starts
	// with protoMagic and a JSON one with "{".
	body, err := l.request(opts).Stream(ctx)
	if err != nil {
		return nil, nil, nil, metav1.ListMeta{}, err
	}
	defer body.Close()
	br := bufio.NewReaderSize(body, 32<<10)
	head, _ := br.Peek(64) // fewer at the end of a short answer
	proto := bytes.HasPrefix(head, protoMagic)
	switch {
	case proto && l.unmarshal != nil:
		return l.protoListFrom(br, lookup)
	case !proto && (l.unmarshal == nil || looksJSON(head)):
		return l.jsonListFrom(br, lookup)
	}
	return nil, nil, nil, metav1.ListMeta{}, fmt.Errorf("reflector: list of %s: unexpected content type: the answer is not %s (it starts with %q)", l.resource, l.answerTypes(), head[:min(len(head), len(protoMagic))])
}

// looksJSON reports whether an answer that starts with head is JSON: its
// first byte other than white space opens an object or an array.
func looksJSON(head []byte) bool {
	head = bytes.TrimLeft(head, " \t\r\n")
	return len(head) > 0 && (head[0] == '{' || head[0] == '[')
}

// answerTypes names the content types l reads.
func (l *restLW[T, E]) answerTypes() string {
	if l.unmarshal != nil {
		return "protobuf or JSON"
	}
	return "JSON"
}

// protoList is protoListFrom of a whole answer.
func (l *restLW[T, E]) protoList(body []byte, lookup lookupFunc[T]) ([]T, []bool, []*RefusedError, metav1.ListMeta, error) {
	return l.protoListFrom(bufio.NewReader(bytes.NewReader(body)), lookup)
}

// protoListFrom reads a protobuf list answer from r as it arrives and decodes
// its items, except those lookup knows (see protoList): the envelope's fields
// one after the other, and in its raw field the list's metadata and one item
// message at a time, read into a buffer that the next item reuses (decoders
// copy what they keep: see ProtoObject). A list of large objects is then read
// with one item's bytes in memory, instead of the whole answer and the copies
// of a buffer grown to hold it. Malformed input is an error, as it is to
// readEnvelope on a whole answer, and an item that cannot be decoded fails the list,
// or is refused, as before; a second raw field replaces the first (protobuf's
// last one wins).
func (l *restLW[T, E]) protoListFrom(r *bufio.Reader, lookup lookupFunc[T]) ([]T, []bool, []*RefusedError, metav1.ListMeta, error) {
	fail := func(err error) ([]T, []bool, []*RefusedError, metav1.ListMeta, error) {
		return nil, nil, nil, metav1.ListMeta{}, fmt.Errorf("reflector: list of %s: %w", l.resource, err)
	}
	if head, _ := r.Peek(len(protoMagic)); !bytes.Equal(head, protoMagic) {
		return fail(wireErr("no %q prefix", protoMagic))
	}
	_, _ = r.Discard(len(protoMagic))
	sr := streamReader{r: r}
	var (
		env     envelope
		lb      listBody
		items   []T
		from    []bool
		refused []*RefusedError
		itemErr error  // the first item that failed the list
		rawErr  error  // the list message is malformed
		scratch []byte // the item being read
		mf      []byte // scratch of decode
	)
	if lookup != nil {
		from = []bool{}
	}
	keys := keyReader[T]{lookup: lookup}
	for {
		f, err := sr.field(math.MaxUint64 - sr.pos) // so that sr.pos never wraps
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(err)
		}
		if f.typ != 2 {
			continue
		}
		switch f.num {
		case 1, 3:
			b, err := sr.read(f.u, nil)
			if err != nil {
				return fail(err)
			}
			if f.num == 3 && len(b) > 0 {
				return fail(wireErr("unsupported content encoding %q", b))
			}
			if f.num == 1 {
				if err := env.readTypeMeta(b); err != nil {
					return fail(err)
				}
			}
		case 2:
			// Only the last raw field counts (protobuf's last one wins): a
			// malformed one fails the list unless another follows it.
			lb, items, from, refused, itemErr, rawErr = listBody{}, items[:0], from[:0], refused[:0], nil, nil
			end := sr.pos + f.u
			for sr.pos < end {
				g, err := sr.field(end - sr.pos)
				if err == io.EOF {
					err = errTruncated
				}
				if err != nil {
					if !errors.Is(err, errWire) {
						return fail(err) // the stream broke
					}
					rawErr = err
					if err := sr.skip(end - sr.pos); err != nil {
						return fail(err)
					}
					break
				}
				if g.typ != 2 {
					continue
				}
				switch g.num {
				case 1:
					b, err := sr.read(g.u, nil)
					if err != nil {
						return fail(err)
					}
					if err := lb.readListMeta(b); err != nil {
						rawErr = err
					}
				case 2:
					raw, err := sr.read(g.u, scratch)
					if err != nil {
						return fail(err)
					}
					scratch = raw
					if itemErr != nil || rawErr != nil {
						continue // the list fails: the rest is only read
					}
					if obj, ok := keys.find(raw); ok {
						items, from = append(items, obj), append(from, true)
						continue
					}
					obj, err := l.decode(raw, &mf)
					if err != nil {
						ref := protoRefusal(raw, err)
						if ref == nil {
							itemErr = fmt.Errorf("item %d: %w", len(items)+len(refused), err)
							continue
						}
						refused = append(refused, ref)
						continue
					}
					items = append(items, obj)
					if from != nil {
						from = append(from, false)
					}
				default:
					if err := sr.skip(g.u); err != nil {
						return fail(err)
					}
				}
			}
		default:
			if err := sr.skip(f.u); err != nil {
				return fail(err)
			}
		}
	}
	if rawErr != nil {
		return fail(rawErr)
	}
	if string(env.kind) != l.kind+"List" {
		return fail(l.wrongKind("the server sent", env.kind, l.kind+"List"))
	}
	if itemErr != nil {
		return fail(itemErr)
	}
	lm := metav1.ListMeta{
		ResourceVersion:    string(lb.resourceVersion),
		Continue:           string(lb.continueToken),
		RemainingItemCount: lb.remaining,
		ShardInfo:          lb.shardInfo,
	}
	if items == nil {
		items = []T{}
	}
	return items, from, refused, lm, nil
}

// protoRefusal names an object message that failed to decode with err: a
// *RefusedError if its key can be read, nil otherwise.
func protoRefusal(raw []byte, err error) *RefusedError {
	k, ok, kerr := readKey(raw)
	if kerr != nil || !ok || len(k.name) == 0 {
		return nil
	}
	u := undecodable{namespace: string(k.namespace), name: string(k.name), rv: string(k.resourceVersion), err: err}
	return &RefusedError{Key: u.key(), ResourceVersion: u.rv, Err: err}
}

// jsonRefusal is protoRefusal for a JSON object.
func jsonRefusal(raw []byte, err error) *RefusedError {
	k, ok := readJSONKey(raw)
	if !ok || k.Metadata.Name == "" {
		return nil
	}
	u := undecodable{namespace: k.Metadata.Namespace, name: k.Metadata.Name, rv: k.Metadata.ResourceVersion, err: err}
	return &RefusedError{Key: u.key(), ResourceVersion: u.rv, Err: err}
}

// jsonKey is what identifies one version of an object in its JSON, read
// without decoding the rest.
type jsonKey struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Namespace       string `json:"namespace"`
		Name            string `json:"name"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
}

// readJSONKey reads the kind, namespace, name and resourceVersion of a JSON
// object. It decodes with the rules of the full decode (utiljson: field
// names match case-sensitively, the last of repeated fields wins), so that
// it finds what decoding would. ok is false when raw is not an object or
// one of those fields is not a string.
func readJSONKey(raw []byte) (k jsonKey, ok bool) {
	return k, utiljson.Unmarshal(raw, &k) == nil
}

// undecodableEvent is the event of type t for an object that failed to decode
// with err (see undecodable), if the refusal names it.
func undecodableEvent(t watch.EventType, ref *RefusedError) watch.Event {
	ns, name, found := strings.Cut(ref.Key, "/")
	if !found {
		ns, name = "", ref.Key
	}
	return watch.Event{Type: t, Object: &undecodable{namespace: ns, name: name, rv: ref.ResourceVersion, err: ref.Err}}
}

// withoutManagedFields returns a copy of l that decodes objects without their
// managedFields: what a reflector whose Transform is StripManagedFields asks
// for (see New). They are cut out of the answer's bytes, protobuf or JSON,
// before the object is decoded, which spares their decoding and their
// allocations (about half of a small object's).
func (l *restLW[T, E]) withoutManagedFields() ListerWatcher[T] {
	c := *l
	c.noManagedFields = true
	return &c
}

// decode decodes one object's protobuf message; buf is scratch space for
// withoutManagedFields, reused from one call to the next.
func (l *restLW[T, E]) decode(raw []byte, buf *[]byte) (T, error) {
	if l.noManagedFields {
		raw = withoutManagedFields(raw, buf)
	}
	obj, err := l.unmarshal(raw)
	if err != nil {
		return nil, fmt.Errorf("cannot decode a %s: %w", l.kind, err)
	}
	return obj, nil
}

// decodeJSON decodes one object's JSON, checking its kind if it names one.
// Like the protobuf path (and client-go's typed clients), it leaves the
// object's TypeMeta empty.
func (l *restLW[T, E]) decodeJSON(raw []byte, buf *[]byte) (T, error) {
	if l.noManagedFields {
		raw = jsonWithoutManagedFields(raw, buf)
	}
	obj := T(new(E))
	if err := utiljson.Unmarshal(raw, obj); err != nil {
		return nil, fmt.Errorf("cannot decode a %s: %w", l.kind, err)
	}
	if k := obj.GetObjectKind().GroupVersionKind().Kind; k != "" && k != l.kind {
		return nil, l.wrongKind("the server sent", []byte(k), l.kind)
	}
	obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	return obj, nil
}

// keyReader looks listed objects up by the key read from their message.
// The zero value (no lookup) finds nothing.
type keyReader[T any] struct {
	lookup lookupFunc[T]
	ns     string // the last namespace seen, reused to spare an allocation
}

// find returns lookup's object for the key in the object message raw. A
// message whose key cannot be read is not found: decoding it tells what is
// wrong with it.
func (k *keyReader[T]) find(raw []byte) (T, bool) {
	var zero T
	if k.lookup == nil {
		return zero, false
	}
	key, ok, err := readKey(raw)
	if err != nil || !ok || len(key.resourceVersion) == 0 || len(key.name) == 0 {
		return zero, false
	}
	if string(key.namespace) != k.ns {
		k.ns = string(key.namespace)
	}
	return k.lookup(k.ns, string(key.name), string(key.resourceVersion))
}

// findJSON is find for an object's JSON. An object that names a kind other
// than kind is not found either.
func (k *keyReader[T]) findJSON(raw []byte, kind string) (T, bool) {
	var zero T
	if k.lookup == nil {
		return zero, false
	}
	key, ok := readJSONKey(raw)
	m := key.Metadata
	if !ok || key.Kind != "" && key.Kind != kind || m.Name == "" || m.ResourceVersion == "" {
		return zero, false
	}
	return k.lookup(m.Namespace, m.Name, m.ResourceVersion)
}

func (l *restLW[T, E]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return l.watch(ctx, opts, nil, false)
}

// watchReusing is the reflector's own watch: it batches events (see
// reusingLister).
func (l *restLW[T, E]) watchReusing(ctx context.Context, opts metav1.ListOptions, lookup lookupFunc[T]) (watch.Interface, error) {
	return l.watch(ctx, opts, lookup, true)
}

func (l *restLW[T, E]) watch(ctx context.Context, opts metav1.ListOptions, lookup lookupFunc[T], batching bool) (watch.Interface, error) {
	if l.err != nil {
		return nil, l.err
	}
	opts.Watch = true
	body, err := l.request(opts).Throttle(nil).Stream(ctx)
	if err != nil {
		return nil, err
	}
	w := &restWatch[T, E]{
		lw:       l,
		body:     body,
		keys:     keyReader[T]{lookup: lookup},
		result:   make(chan watch.Event, restWatchBuffer),
		done:     make(chan struct{}),
		batching: batching,
		initial:  opts.SendInitialEvents != nil && *opts.SendInitialEvents,
	}
	if batching {
		w.free = make(chan []watch.Event, 2)
	}
	go w.run()
	return w, nil
}

// restWatchBuffer is how many decoded events a watch's goroutine may hold
// ahead of its reader. While a list streams in, the goroutine decodes the next
// events as the reader stores the last ones, and neither has to wake the other
// for every event: with one event at a time, the two goroutines' handoffs cost
// about a quarter of the client's CPU during a streaming list.
const restWatchBuffer = 128

// restWatch is one watch stream of FromREST. Its goroutine reads and
// decodes events until the stream ends or Stop is called, then closes the
// result channel.
type restWatch[T JSONObject[E], E any] struct {
	lw     *restLW[T, E]
	body   io.ReadCloser
	result chan watch.Event
	done   chan struct{} // closed by Stop
	stop   sync.Once

	// keys is used by the goroutine only; its lookup is dropped at the end
	// of the initial events.
	keys keyReader[T]
	// batching is set by watchReusing: the goroutine hands over the events it
	// has decoded while the next one is already read as one *eventBatch, so that
	// the reader, which has little to do for each, does not wait and is not
	// woken up again for every event. Until the end of the initial events of a
	// streaming list (initial), only Added events are batched. free holds the
	// events slices the reader released.
	batching bool
	initial  bool
	free     chan []watch.Event
	batch    []watch.Event
	// buf is the goroutine's scratch space for decoding (see decode).
	buf []byte
}

func (w *restWatch[T, E]) ResultChan() <-chan watch.Event { return w.result }

func (w *restWatch[T, E]) Stop() {
	w.stop.Do(func() {
		close(w.done)
		w.body.Close()
	})
}

func (w *restWatch[T, E]) run() {
	defer close(w.result)
	defer w.body.Close()
	br := bufio.NewReaderSize(w.body, 32<<10)
	head, err := br.Peek(1)
	if err != nil {
		return // the stream ended before its first event
	}
	if head[0] == '{' {
		w.runJSON(br)
		return
	}
	if w.lw.unmarshal == nil {
		w.fail(fmt.Errorf("the stream is not JSON: it starts with %q", head))
		return
	}
	frames := frameReader{r: br}
	for {
		// A batch goes as soon as the next frame is not all read: the reader
		// is not made to wait for events the server has not sent yet.
		if len(w.batch) > 0 && !frames.ready() && !w.flush() {
			return
		}
		frame, err := frames.next()
		if err != nil {
			if !w.flush() {
				return
			}
			if errors.Is(err, errWire) {
				w.fail(err)
			}
			// Otherwise the stream ended or broke, or Stop was called.
			return
		}
		initial := w.initial // as it was before this event, which may end it
		ev, err := w.decodeFrame(frame)
		if err != nil {
			if w.flush() {
				w.fail(err)
			}
			return
		}
		if w.batching && batchable[T](ev, initial) {
			if w.batch == nil {
				select {
				case w.batch = <-w.free:
				default:
					w.batch = make([]watch.Event, 0, batchMax)
				}
			}
			w.batch = append(w.batch, ev)
			if len(w.batch) == batchMax && !w.flush() {
				return
			}
			continue
		}
		if !w.flush() || !w.send(ev) {
			return
		}
	}
}

// batchable reports whether e may go in an *eventBatch: an event with a decoded
// T or a *storedObject, Added during the initial events of a streaming list, of
// any type but Error after them.
func batchable[T Object](e watch.Event, initial bool) bool {
	switch e.Object.(type) {
	case T, *storedObject[T]:
	default:
		return false
	}
	if initial {
		return e.Type == watch.Added
	}
	return e.Type != watch.Error
}

// flush sends the events batched so far, if any, as one *eventBatch. It
// returns false if Stop was called.
func (w *restWatch[T, E]) flush() bool {
	if len(w.batch) == 0 {
		return true
	}
	b := &eventBatch{events: w.batch, free: w.free}
	w.batch = nil
	return w.send(watch.Event{Type: watch.Added, Object: b})
}

// decodeFrame decodes one protobuf watch frame.
func (w *restWatch[T, E]) decodeFrame(frame []byte) (watch.Event, error) {
	typ, object, err := readWatchEvent(frame)
	if err != nil {
		return watch.Event{}, err
	}
	env, err := readEnvelope(object)
	if err != nil {
		return watch.Event{}, err
	}
	var t watch.EventType
	switch string(typ) {
	case string(watch.Error):
		st := new(metav1.Status)
		if err := st.Unmarshal(env.raw); err != nil {
			return watch.Event{}, fmt.Errorf("cannot decode the Status of an error event: %w", err)
		}
		return watch.Event{Type: watch.Error, Object: st}, nil
	case string(watch.Added):
		t = watch.Added
	case string(watch.Modified):
		t = watch.Modified
	case string(watch.Deleted):
		t = watch.Deleted
	case string(watch.Bookmark):
		t = watch.Bookmark
	default:
		return watch.Event{}, fmt.Errorf("unknown watch event type %q", typ)
	}
	if string(env.kind) != w.lw.kind {
		return watch.Event{}, w.lw.wrongKind(string(t)+" event carries", env.kind, w.lw.kind)
	}
	if t == watch.Added || t == watch.Modified {
		if obj, ok := w.keys.find(env.raw); ok {
			return watch.Event{Type: t, Object: &storedObject[T]{obj}}, nil
		}
	}
	obj, err := w.lw.decode(env.raw, &w.buf)
	if err != nil {
		if ref := protoRefusal(env.raw, err); ref != nil && t != watch.Bookmark {
			return undecodableEvent(t, ref), nil
		}
		return watch.Event{}, err
	}
	w.afterEvent(t, obj)
	return watch.Event{Type: t, Object: obj}, nil
}

// afterEvent drops the lookup once the initial events have ended: the
// events that follow are changes, to be decoded.
func (w *restWatch[T, E]) afterEvent(t watch.EventType, obj T) {
	if t == watch.Bookmark && obj.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
		w.keys.lookup = nil
		w.initial = false
	}
}

// runJSON reads a JSON watch stream, as run does a protobuf one.
func (w *restWatch[T, E]) runJSON(r io.Reader) {
	dec := json.NewDecoder(r)
	for {
		var e struct {
			Type   watch.EventType `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := dec.Decode(&e); err != nil {
			var syntax *json.SyntaxError
			var typ *json.UnmarshalTypeError
			if errors.As(err, &syntax) || errors.As(err, &typ) {
				w.fail(err)
			}
			return
		}
		ev, err := w.decodeJSONEvent(e.Type, e.Object)
		if err != nil {
			w.fail(err)
			return
		}
		if !w.send(ev) {
			return
		}
	}
}

func (w *restWatch[T, E]) decodeJSONEvent(t watch.EventType, raw []byte) (watch.Event, error) {
	switch t {
	case watch.Error:
		st := new(metav1.Status)
		if err := utiljson.Unmarshal(raw, st); err != nil {
			return watch.Event{}, fmt.Errorf("cannot decode the Status of an error event: %w", err)
		}
		return watch.Event{Type: t, Object: st}, nil
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
	default:
		return watch.Event{}, fmt.Errorf("unknown watch event type %q", t)
	}
	if t == watch.Added || t == watch.Modified {
		if obj, ok := w.keys.findJSON(raw, w.lw.kind); ok {
			return watch.Event{Type: t, Object: &storedObject[T]{obj}}, nil
		}
	}
	obj, err := w.lw.decodeJSON(raw, &w.buf)
	if err != nil {
		if ref := jsonRefusal(raw, err); ref != nil && t != watch.Bookmark {
			return undecodableEvent(t, ref), nil
		}
		return watch.Event{}, err
	}
	w.afterEvent(t, obj)
	return watch.Event{Type: t, Object: obj}, nil
}

// send hands e to the reader; false when Stop was called.
func (w *restWatch[T, E]) send(e watch.Event) bool {
	select {
	case w.result <- e:
		return true
	case <-w.done:
		return false
	}
}

// fail sends an Error event for a malformed stream; the stream ends. Its Status
// is marked as the client's own (see clientSide), as client-go's stream watcher
// marks the errors it makes up.
func (w *restWatch[T, E]) fail(err error) {
	err = fmt.Errorf("reflector: watch of %s: %w", w.lw.resource, err)
	st := apierrors.NewInternalError(err).ErrStatus
	st.Details.Causes = append(st.Details.Causes, metav1.StatusCause{Type: clientSideCause, Message: err.Error()})
	w.send(watch.Event{Type: watch.Error, Object: &st})
}
