package reflector

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/watchlist"
)

// Object is what a reflector stores: a Kubernetes API object with metadata.
// Pointers to generated types (*corev1.ConfigMap), *unstructured.Unstructured
// and *metav1.PartialObjectMetadata all satisfy it.
type Object interface {
	runtime.Object
	metav1.Object
}

// ListerWatcher is the reflector's view of one API collection. The options
// carry everything the reflector decides: resourceVersion and its match
// rule, limit and continue token, label and field selectors, watch timeout,
// bookmarks and sendInitialEvents. Implementations pass them to the server
// unchanged.
//
// List returns one page: its items decoded to T and the list's metadata
// (resourceVersion, continue token, remaining item count). Watch returns a
// stream whose Added, Modified, Deleted and Bookmark events carry T and
// whose Error events carry a *metav1.Status (or its unstructured form).
//
// Both must honour ctx. FromTyped, FromDynamic and FromMetadata adapt
// client-go's clients; Funcs adapts two functions.
type ListerWatcher[T Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) ([]T, metav1.ListMeta, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// Funcs implements ListerWatcher with two functions. A nil function makes
// its method return an error.
type Funcs[T Object] struct {
	ListFunc  func(ctx context.Context, opts metav1.ListOptions) ([]T, metav1.ListMeta, error)
	WatchFunc func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// List calls f.ListFunc.
func (f Funcs[T]) List(ctx context.Context, opts metav1.ListOptions) ([]T, metav1.ListMeta, error) {
	if f.ListFunc == nil {
		return nil, metav1.ListMeta{}, errors.New("reflector: Funcs.ListFunc is nil")
	}
	return f.ListFunc(ctx, opts)
}

// Watch calls f.WatchFunc.
func (f Funcs[T]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if f.WatchFunc == nil {
		return nil, errors.New("reflector: Funcs.WatchFunc is nil")
	}
	return f.WatchFunc(ctx, opts)
}

// TypedClient is the part of a client-go typed client that FromTyped uses,
// for instance kubernetes.Interface's CoreV1().ConfigMaps(namespace). Get is
// never called: it is there so that Go infers T from the client.
type TypedClient[T Object, L runtime.Object] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// FromTyped adapts a client-go typed client, namespaced or not:
//
//	lw := reflector.FromTyped(client.CoreV1().ConfigMaps(namespace))
//
// The item type is inferred from the client. Items are not copied: each T
// points into the list's Items array, which is found once per page by
// reflection (no reflection per item). A page's array therefore stays in
// memory while any of its items does; a Transform that returns a fresh copy
// detaches an item from it. Use WithProtobuf on the rest.Config for the
// compact wire format of built-in types.
func FromTyped[T interface {
	*E
	Object
}, E any, L runtime.Object](c TypedClient[T, L]) ListerWatcher[T] {
	lt := reflect.TypeFor[L]()
	var items []int
	if lt.Kind() == reflect.Pointer && lt.Elem().Kind() == reflect.Struct {
		if f, ok := lt.Elem().FieldByName("Items"); ok && f.Type == reflect.TypeFor[[]E]() {
			items = f.Index
		}
	}
	return typedLW[T, E, L]{c: c, items: items}
}

type typedLW[T interface {
	*E
	Object
}, E any, L runtime.Object] struct {
	c TypedClient[T, L]
	// items is the field index of `Items []E` in *L, or nil when the list
	// type has no such field and meta.ExtractList is used instead.
	items []int
}

func (t typedLW[T, E, L]) List(ctx context.Context, opts metav1.ListOptions) ([]T, metav1.ListMeta, error) {
	list, err := t.c.List(ctx, opts)
	if err != nil {
		return nil, metav1.ListMeta{}, err
	}
	if isNil(list) {
		return nil, metav1.ListMeta{}, errNilList
	}
	lm, err := listMeta(list)
	if err != nil {
		return nil, lm, err
	}
	if t.items != nil {
		items, _ := reflect.ValueOf(list).Elem().FieldByIndex(t.items).Interface().([]E)
		return pointers[T](items), lm, nil
	}
	objs, err := meta.ExtractList(list)
	if err != nil {
		return nil, lm, fmt.Errorf("reflector: cannot extract items from %T: %w", list, err)
	}
	out := make([]T, len(objs))
	for i, o := range objs {
		v, ok := o.(T)
		if !ok {
			return nil, lm, fmt.Errorf("reflector: list %T holds a %T, want %T", list, o, v)
		}
		out[i] = v
	}
	return out, lm, nil
}

func (t typedLW[T, E, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return t.c.Watch(ctx, opts)
}

// IsWatchListSemanticsUnSupported reports whether the client cannot stream lists:
// it says so, or it is one of client-go's fake typed clients, which embed
// *testing.Fake (and so have its InvokesWatch method) and ignore
// sendInitialEvents.
func (t typedLW[T, E, L]) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(t.c) ||
		reflect.ValueOf(t.c).MethodByName("InvokesWatch").IsValid()
}

var errNilList = errors.New("reflector: client returned a nil list and no error")

// pointers returns pointers to the elements of items, without copying them.
func pointers[T interface{ *E }, E any](items []E) []T {
	out := make([]T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

func listMeta(list runtime.Object) (metav1.ListMeta, error) {
	if lm, ok := any(list).(metav1.ListInterface); ok {
		out := metav1.ListMeta{
			ResourceVersion:    lm.GetResourceVersion(),
			Continue:           lm.GetContinue(),
			RemainingItemCount: lm.GetRemainingItemCount(),
		}
		if si, ok := lm.(interface{ GetShardInfo() *metav1.ShardInfo }); ok {
			out.ShardInfo = si.GetShardInfo()
		}
		return out, nil
	}
	la, err := meta.ListAccessor(list)
	if err != nil {
		return metav1.ListMeta{}, fmt.Errorf("reflector: cannot read list metadata of %T: %w", list, err)
	}
	return metav1.ListMeta{
		ResourceVersion:    la.GetResourceVersion(),
		Continue:           la.GetContinue(),
		RemainingItemCount: la.GetRemainingItemCount(),
	}, nil
}

// FromDynamic adapts a dynamic client resource, for custom resources without
// generated code:
//
//	lw := reflector.FromDynamic(dyn.Resource(gvr).Namespace(namespace))
//
// Items point into the list's Items array, as with FromTyped.
func FromDynamic(c dynamic.ResourceInterface) ListerWatcher[*unstructured.Unstructured] {
	return dynamicLW{c}
}

type dynamicLW struct{ c dynamic.ResourceInterface }

func (d dynamicLW) List(ctx context.Context, opts metav1.ListOptions) ([]*unstructured.Unstructured, metav1.ListMeta, error) {
	list, err := d.c.List(ctx, opts)
	if err != nil {
		return nil, metav1.ListMeta{}, err
	}
	if list == nil {
		return nil, metav1.ListMeta{}, errNilList
	}
	return pointers[*unstructured.Unstructured](list.Items), metav1.ListMeta{
		ResourceVersion:    list.GetResourceVersion(),
		Continue:           list.GetContinue(),
		RemainingItemCount: list.GetRemainingItemCount(),
		ShardInfo:          unstructuredShardInfo(list),
	}, nil
}

func (d dynamicLW) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return d.c.Watch(ctx, opts)
}

// IsWatchListSemanticsUnSupported is typedLW's.
func (d dynamicLW) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(d.c)
}

// FromMetadata adapts a metadata client resource, which transfers only
// object metadata (protobuf by default):
//
//	lw := reflector.FromMetadata(md.Resource(gvr).Namespace(namespace))
//
// Items point into the list's Items array, as with FromTyped.
func FromMetadata(c metadata.ResourceInterface) ListerWatcher[*metav1.PartialObjectMetadata] {
	return metadataLW{c}
}

type metadataLW struct{ c metadata.ResourceInterface }

func (m metadataLW) List(ctx context.Context, opts metav1.ListOptions) ([]*metav1.PartialObjectMetadata, metav1.ListMeta, error) {
	list, err := m.c.List(ctx, opts)
	if err != nil {
		return nil, metav1.ListMeta{}, err
	}
	if list == nil {
		return nil, metav1.ListMeta{}, errNilList
	}
	return pointers[*metav1.PartialObjectMetadata](list.Items), list.ListMeta, nil
}

func (m metadataLW) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return m.c.Watch(ctx, opts)
}

// IsWatchListSemanticsUnSupported is typedLW's.
func (m metadataLW) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(m.c)
}

// streamingUnsupported reports whether lw says it cannot stream lists, through
// the method client-go's fake clients and ctrlkit's adapters of them have
// (IsWatchListSemanticsUnSupported): in WatchListAuto mode the reflector then
// uses LIST from the start.
func streamingUnsupported(lw any) bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(lw)
}

// WithProtobuf returns a copy of cfg that asks the server for protobuf, the
// compact and fast wire format of built-in types, and still accepts JSON for
// the rest. Use it for clientsets of built-in types:
//
//	client, err := kubernetes.NewForConfig(reflector.WithProtobuf(cfg))
//
// Custom resources have no protobuf form: leave their typed clients on JSON.
// The dynamic client always speaks JSON and the metadata client already
// prefers protobuf, so neither needs this.
func WithProtobuf(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return c
}

// unstructuredShardInfo reads a dynamic list's metadata.shardInfo.
func unstructuredShardInfo(list *unstructured.UnstructuredList) *metav1.ShardInfo {
	sel, found, err := unstructured.NestedString(list.Object, "metadata", "shardInfo", "selector")
	if err != nil || !found {
		return nil
	}
	return &metav1.ShardInfo{Selector: sel}
}
