package reflector

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"reflect"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

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
// has no protobuf form for the type) is decoded normally. Requests go
// through c, so authentication, retries and error decoding are c's; watch
// requests are not rate limited. A malformed response is reported as an
// error (on a watch, an Error event with an internal-error Status that ends
// the stream), never a panic. Each watch runs one goroutine that reads the
// stream; it ends when the watch is stopped, its context is done or the
// stream ends. The ListerWatcher is safe for concurrent use.
func FromREST[T ProtoObject[E], E any](c rest.Interface, resource, namespace string) ListerWatcher[T] {
	l := &restLW[T, E]{c: c, resource: resource, namespace: namespace, kind: reflect.TypeFor[E]().Name()}
	switch {
	case isNil(c):
		l.err = errors.New("reflector: FromREST was given a nil REST client")
	case resource == "":
		l.err = errors.New("reflector: FromREST was given an empty resource name")
	}
	return l
}

// restLW is FromREST's ListerWatcher. It is immutable and safe for
// concurrent use.
type restLW[T ProtoObject[E], E any] struct {
	c                   rest.Interface
	resource, namespace string
	kind                string // the kind of T, for checking answers
	// err, when set, is what every List and Watch returns: FromREST's
	// arguments were unusable.
	err error
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
		SetHeader("Accept", acceptProtobuf)
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
	result := l.request(opts).Do(ctx)
	if err := result.Error(); err != nil {
		return nil, nil, nil, metav1.ListMeta{}, err
	}
	var ct string
	result.ContentType(&ct)
	body, _ := result.Raw()
	mt, _, _ := mime.ParseMediaType(ct)
	switch mt {
	case runtime.ContentTypeProtobuf:
		return l.protoList(body, lookup)
	case runtime.ContentTypeJSON:
		items, refused, lm, err := l.jsonList(body)
		return items, nil, refused, lm, err
	}
	return nil, nil, nil, metav1.ListMeta{}, fmt.Errorf("reflector: list of %s: unexpected content type %q", l.resource, ct)
}

func (l *restLW[T, E]) protoList(body []byte, lookup lookupFunc[T]) ([]T, []bool, []*RefusedError, metav1.ListMeta, error) {
	var lm metav1.ListMeta
	env, err := readEnvelope(body)
	if err != nil {
		return nil, nil, nil, lm, fmt.Errorf("reflector: list of %s: %w", l.resource, err)
	}
	if string(env.kind) != l.kind+"List" {
		return nil, nil, nil, lm, fmt.Errorf("reflector: list of %s: the server sent a %q, want a %sList", l.resource, env.kind, l.kind)
	}
	lb, err := readList(env.raw)
	if err != nil {
		return nil, nil, nil, lm, fmt.Errorf("reflector: list of %s: %w", l.resource, err)
	}
	lm = metav1.ListMeta{
		ResourceVersion:    string(lb.resourceVersion),
		Continue:           string(lb.continueToken),
		RemainingItemCount: lb.remaining,
	}
	items := make([]T, 0, len(lb.items))
	var fromStore []bool
	if lookup != nil {
		fromStore = make([]bool, 0, len(lb.items))
	}
	var refused []*RefusedError
	keys := keyReader[T]{lookup: lookup}
	for i, raw := range lb.items {
		if obj, ok := keys.find(raw); ok {
			items, fromStore = append(items, obj), append(fromStore, true)
			continue
		}
		obj, err := l.decode(raw)
		if err != nil {
			ref := protoRefusal(raw, err)
			if ref == nil {
				return nil, nil, nil, lm, fmt.Errorf("reflector: list of %s: item %d: %w", l.resource, i, err)
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
	var m struct {
		Metadata struct {
			Namespace       string `json:"namespace"`
			Name            string `json:"name"`
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if json.Unmarshal(raw, &m) != nil || m.Metadata.Name == "" {
		return nil
	}
	u := undecodable{namespace: m.Metadata.Namespace, name: m.Metadata.Name, rv: m.Metadata.ResourceVersion, err: err}
	return &RefusedError{Key: u.key(), ResourceVersion: u.rv, Err: err}
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

// decode decodes one object's protobuf message.
func (l *restLW[T, E]) decode(raw []byte) (T, error) {
	obj := T(new(E))
	if err := obj.Unmarshal(raw); err != nil {
		return nil, fmt.Errorf("cannot decode a %s: %w", l.kind, err)
	}
	return obj, nil
}

// jsonList decodes a JSON list, each item into its own allocation.
func (l *restLW[T, E]) jsonList(body []byte) ([]T, []*RefusedError, metav1.ListMeta, error) {
	var list struct {
		Kind     string            `json:"kind"`
		Metadata metav1.ListMeta   `json:"metadata"`
		Items    []json.RawMessage `json:"items"`
	}
	if err := utiljson.Unmarshal(body, &list); err != nil {
		return nil, nil, metav1.ListMeta{}, fmt.Errorf("reflector: list of %s: %w", l.resource, err)
	}
	if list.Kind != l.kind+"List" {
		return nil, nil, metav1.ListMeta{}, fmt.Errorf("reflector: list of %s: the server sent a %q, want a %sList", l.resource, list.Kind, l.kind)
	}
	items := make([]T, 0, len(list.Items))
	var refused []*RefusedError
	for i, raw := range list.Items {
		obj, err := l.decodeJSON(raw)
		if err != nil {
			ref := jsonRefusal(raw, err)
			if ref == nil {
				return nil, nil, metav1.ListMeta{}, fmt.Errorf("reflector: list of %s: item %d: %w", l.resource, i, err)
			}
			refused = append(refused, ref)
			continue
		}
		items = append(items, obj)
	}
	return items, refused, list.Metadata, nil
}

// decodeJSON decodes one object's JSON, checking its kind if it names one.
// Like the protobuf path (and client-go's typed clients), it leaves the
// object's TypeMeta empty.
func (l *restLW[T, E]) decodeJSON(raw []byte) (T, error) {
	obj := T(new(E))
	if err := utiljson.Unmarshal(raw, obj); err != nil {
		return nil, fmt.Errorf("cannot decode a %s: %w", l.kind, err)
	}
	if k := obj.GetObjectKind().GroupVersionKind().Kind; k != "" && k != l.kind {
		return nil, fmt.Errorf("the server sent a %q, want a %s", k, l.kind)
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

func (l *restLW[T, E]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return l.watch(ctx, opts, nil)
}

func (l *restLW[T, E]) watchReusing(ctx context.Context, opts metav1.ListOptions, lookup lookupFunc[T]) (watch.Interface, error) {
	return l.watch(ctx, opts, lookup)
}

func (l *restLW[T, E]) watch(ctx context.Context, opts metav1.ListOptions, lookup lookupFunc[T]) (watch.Interface, error) {
	if l.err != nil {
		return nil, l.err
	}
	opts.Watch = true
	body, err := l.request(opts).Throttle(nil).Stream(ctx)
	if err != nil {
		return nil, err
	}
	w := &restWatch[T, E]{
		lw:     l,
		body:   body,
		keys:   keyReader[T]{lookup: lookup},
		result: make(chan watch.Event),
		done:   make(chan struct{}),
	}
	go w.run()
	return w, nil
}

// restWatch is one watch stream of FromREST. Its goroutine reads and
// decodes events until the stream ends or Stop is called, then closes the
// result channel.
type restWatch[T ProtoObject[E], E any] struct {
	lw     *restLW[T, E]
	body   io.ReadCloser
	result chan watch.Event
	done   chan struct{} // closed by Stop
	stop   sync.Once

	// keys is used by the goroutine only; its lookup is dropped at the end
	// of the initial events.
	keys keyReader[T]
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
	frames := frameReader{r: br}
	for {
		frame, err := frames.next()
		if err != nil {
			if errors.Is(err, errWire) {
				w.fail(err)
			}
			// Otherwise the stream ended or broke, or Stop was called.
			return
		}
		ev, err := w.decodeFrame(frame)
		if err != nil {
			w.fail(err)
			return
		}
		if !w.send(ev) {
			return
		}
	}
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
		return watch.Event{}, fmt.Errorf("%s event carries a %q, want a %s", t, env.kind, w.lw.kind)
	}
	if t == watch.Added || t == watch.Modified {
		if obj, ok := w.keys.find(env.raw); ok {
			return watch.Event{Type: t, Object: &storedObject[T]{obj}}, nil
		}
	}
	obj, err := w.lw.decode(env.raw)
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
	}
}

// runJSON reads a JSON watch stream: each event decoded normally.
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
	obj, err := w.lw.decodeJSON(raw)
	if err != nil {
		if ref := jsonRefusal(raw, err); ref != nil && t != watch.Bookmark {
			return undecodableEvent(t, ref), nil
		}
		return watch.Event{}, err
	}
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
