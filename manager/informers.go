package manager

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/indexer"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// Options selects the objects of a shared informer. Namespace, LabelSelector,
// FieldSelector and Transform are part of the informer's identity: asking with
// the same ones returns the same informer.
type Options[T reflector.Object] struct {
	// Namespace restricts the informer to one namespace; "" means all (and is
	// the only choice for a cluster-scoped resource).
	Namespace string
	// LabelSelector and FieldSelector restrict the objects, in kubectl's syntax.
	LabelSelector string
	FieldSelector string
	// Transform is the informer's Transform (see informer.Config.Transform);
	// reflector.StripManagedFields is a ready one. Transforms are told apart by
	// their code: two closures of one function literal count as the same
	// Transform, whatever they captured.
	Transform func(T) (T, error)
	// Indexers are added to the informer's cache (informer.AddIndexes). An index
	// whose name the shared informer already has is kept as it is: give indexes
	// names that say what they compute.
	Indexers indexer.Indexers[T]
	// Shard, with Config.Sharding, makes the informer hold only this
	// replica's share of the objects, by the rule given (see Sharding);
	// the default, Whole, holds them all. Part of the informer's identity.
	Shard ShardRule
}

// informerKey identifies a shared informer.
type informerKey struct {
	gvr       schema.GroupVersionResource
	goType    reflect.Type
	namespace string
	labels    string
	fields    string
	transform uintptr
	shard     ShardRule
}

// sharedInformer is what the manager needs of an informer, whatever its type.
type sharedInformer interface {
	Name() string
	Run(ctx context.Context) error
	HasSynced() bool
	Health() reflector.Health
	LastAppliedResourceVersion() string
	ServerResourceVersion(ctx context.Context) (string, error)
	CatchUp(ctx context.Context, rv string) error
	DataResourceVersion() string
}

// informerEntry is one shared informer and its users.
type informerEntry struct {
	key  informerKey
	inf  sharedInformer
	len  func() int // objects in the cache
	refs int        // Typed/Custom/Dynamic/Metadata calls not yet Released; guarded by Manager.mu

	// Set when it starts, under Manager.mu.
	stop context.CancelFunc
	done chan struct{} // closed when its Run has returned
}

// Typed returns the shared informer of a built-in type, such as *corev1.Pod,
// which reads the server's protobuf (reflector.FromREST). The resource is found
// from the type through Config.Scheme and the server's discovery.
//
//	pods, err := manager.Typed[*corev1.Pod](m, manager.Options[*corev1.Pod]{})
func Typed[T reflector.ProtoObject[E], E any](m *Manager, o Options[T]) (*informer.Informer[T], error) {
	gvk, err := m.kindOf(any(new(E)).(runtime.Object))
	if err != nil {
		return nil, err
	}
	mapping, err := m.mapping(gvk, o.Namespace)
	if err != nil {
		return nil, err
	}
	return shared(m, mapping, o, func() (reflector.ListerWatcher[T], error) {
		c, err := m.clientLocked(gvk.GroupVersion(), false)
		if err != nil {
			return nil, err
		}
		return reflector.FromREST[T](c, mapping.Resource.Resource, o.Namespace), nil
	})
}

// Dynamic returns the shared informer of a resource as unstructured objects.
func Dynamic(m *Manager, gvk schema.GroupVersionKind, o Options[*unstructured.Unstructured]) (*informer.Informer[*unstructured.Unstructured], error) {
	mapping, err := m.mapping(gvk, o.Namespace)
	if err != nil {
		return nil, err
	}
	return shared(m, mapping, o, func() (reflector.ListerWatcher[*unstructured.Unstructured], error) {
		return reflector.FromDynamic(m.dyn.Resource(mapping.Resource).Namespace(o.Namespace)), nil
	})
}

// Metadata returns the shared informer of a resource's metadata only
// (PartialObjectMetadata), which costs a fraction of the full objects' memory.
func Metadata(m *Manager, gvk schema.GroupVersionKind, o Options[*metav1.PartialObjectMetadata]) (*informer.Informer[*metav1.PartialObjectMetadata], error) {
	mapping, err := m.mapping(gvk, o.Namespace)
	if err != nil {
		return nil, err
	}
	return shared(m, mapping, o, func() (reflector.ListerWatcher[*metav1.PartialObjectMetadata], error) {
		return reflector.FromMetadata(m.meta.Resource(mapping.Resource).Namespace(o.Namespace)), nil
	})
}

// Release says that one user of inf (one call of Typed, Custom, Dynamic or
// Metadata that returned it) no longer needs it. When the last user releases
// it, the informer stops, Release waits until it has, and the manager forgets
// it, so that its cache can be garbage-collected once the caller drops inf too.
// Asking for it again then makes a new informer. Release fails for an informer
// the manager does not hold (released already, or not made by it).
func Release[T reflector.Object](m *Manager, inf *informer.Informer[T]) error {
	m.mu.Lock()
	e := m.byPointer[inf]
	if e == nil {
		m.mu.Unlock()
		return fmt.Errorf("manager: Release of informer %q, which the manager does not hold", inf.Name())
	}
	if e.refs--; e.refs > 0 {
		m.mu.Unlock()
		return nil
	}
	delete(m.informers, e.key)
	delete(m.byPointer, inf)
	if e.key.shard != Whole {
		m.sharder.removeInformer(inf.Name())
	}
	m.order = slices.DeleteFunc(m.order, func(o *informerEntry) bool { return o == e })
	stop, done := e.stop, e.done
	m.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	m.log.Info("informer released and stopped", "informer", inf.Name())
	return nil
}

// shared returns the informer of mapping and o, making it with newLW the first
// time, and counts one more user of it.
func shared[T reflector.Object](m *Manager, mapping *meta.RESTMapping, o Options[T], newLW func() (reflector.ListerWatcher[T], error)) (*informer.Informer[T], error) {
	key := informerKey{
		gvr:       mapping.Resource,
		goType:    reflect.TypeFor[T](),
		namespace: o.Namespace,
		labels:    o.LabelSelector,
		fields:    o.FieldSelector,
		shard:     o.Shard,
	}
	if err := m.sharder.checkMapping(mapping, o.Shard); err != nil {
		return nil, err
	}
	if o.Transform != nil {
		key.transform = reflect.ValueOf(o.Transform).Pointer()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state == stopped {
		return nil, ErrStopped
	}
	if e := m.informers[key]; e != nil {
		inf := e.inf.(*informer.Informer[T])
		if err := addIndexes(inf, o.Indexers); err != nil {
			return nil, err
		}
		e.refs++
		return inf, nil
	}
	lw, err := newLW()
	if err != nil {
		return nil, err
	}
	for name, f := range o.Indexers {
		if f == nil {
			return nil, fmt.Errorf("manager: index %q has a nil function", name)
		}
	}
	name := informerName(key)
	for i := 2; m.nameTakenLocked(name); i++ {
		name = fmt.Sprintf("%s #%d", informerName(key), i) // another Transform
	}
	rc := reflectorConfig[T](o)
	if o.Shard != Whole {
		rc.Shard = m.sharder.shardFor(o.Shard)
	}
	inf := informer.New(lw, informer.Config[T]{
		Name:      name,
		Indexers:  o.Indexers,
		Transform: o.Transform,
		Reflector: rc,
		Scope:     informer.Scope{Resource: mapping.Resource.GroupResource(), Namespace: o.Namespace},
		Logger:    m.log.WithName("informer").WithValues("informer", name),
	})
	if o.Shard != Whole {
		m.sharder.addInformer(name, o.Shard, inf, rc.Shard)
	}
	e := &informerEntry{key: key, inf: inf, len: func() int { return inf.Indexer().Len() }, refs: 1}
	m.informers[key] = e
	m.byPointer[inf] = e
	m.order = append(m.order, e)
	if m.startInformer != nil {
		m.startInformer(e)
	}
	return inf, nil
}

func reflectorConfig[T reflector.Object](o Options[T]) reflector.Config[T] {
	return reflector.Config[T]{LabelSelector: o.LabelSelector, FieldSelector: o.FieldSelector}
}

// addIndexes adds to inf the indexes of indexers whose names it lacks.
func addIndexes[T reflector.Object](inf *informer.Informer[T], indexers indexer.Indexers[T]) error {
	if len(indexers) == 0 {
		return nil
	}
	have := inf.Indexer().IndexNames()
	add := indexer.Indexers[T]{}
	for name, f := range indexers {
		if !slices.Contains(have, name) {
			add[name] = f
		}
	}
	if len(add) == 0 {
		return nil
	}
	if err := inf.AddIndexes(add); err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	return nil
}

// informerName names an informer for logs, errors and metrics: its resource,
// then its namespace and selectors when it has them.
func informerName(k informerKey) string {
	var b strings.Builder
	b.WriteString(k.gvr.Resource)
	if k.gvr.Group != "" {
		b.WriteString("." + k.gvr.Group)
	}
	if k.namespace != "" {
		b.WriteString(" in " + k.namespace)
	}
	if k.labels != "" {
		b.WriteString(" labels " + k.labels)
	}
	if k.fields != "" {
		b.WriteString(" fields " + k.fields)
	}
	switch k.goType {
	case reflect.TypeFor[*unstructured.Unstructured]():
		b.WriteString(" (dynamic)")
	case reflect.TypeFor[*metav1.PartialObjectMetadata]():
		b.WriteString(" (metadata)")
	}
	return b.String()
}

// nameTakenLocked reports whether an informer of the manager has that name.
// Requires m.mu held.
func (m *Manager) nameTakenLocked(name string) bool {
	return slices.ContainsFunc(m.order, func(e *informerEntry) bool { return e.inf.Name() == name })
}

// kindOf finds the group, version and kind of a typed object in the scheme.
func (m *Manager) kindOf(obj runtime.Object) (schema.GroupVersionKind, error) {
	gvks, _, err := m.scheme.ObjectKinds(obj)
	if err != nil {
		return schema.GroupVersionKind{}, fmt.Errorf("manager: %T: %w", obj, err)
	}
	return gvks[0], nil
}

// mapping finds the resource of gvk through discovery, asking the server again
// once if it does not know the kind (a CRD installed since the last look).
func (m *Manager) mapping(gvk schema.GroupVersionKind, namespace string) (*meta.RESTMapping, error) {
	mapping, err := m.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if r, ok := m.mapper.(meta.ResettableRESTMapper); ok && meta.IsNoMatchError(err) {
		r.Reset()
		mapping, err = m.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, fmt.Errorf("manager: resource of %v: %w", gvk, err)
	}
	if namespace != "" && mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		return nil, fmt.Errorf("manager: %v is cluster-scoped: Options.Namespace must be empty, not %q", gvk, namespace)
	}
	return mapping, nil
}

// clientLocked returns the manager's REST client of one API group and version,
// which asks for protobuf unless json is set. Requires m.mu held.
func (m *Manager) clientLocked(gv schema.GroupVersion, json bool) (rest.Interface, error) {
	key := clientKey{gv: gv, json: json}
	if c := m.clients[key]; c != nil {
		return c, nil
	}
	cfg := m.rest
	if !json {
		cfg = reflector.WithProtobuf(cfg)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.GroupVersion = &gv
	cfg.APIPath = "/apis"
	if gv.Group == "" {
		cfg.APIPath = "/api"
	}
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	c, err := rest.RESTClientForConfigAndClient(cfg, m.http)
	if err != nil {
		return nil, fmt.Errorf("manager: REST client for %v: %w", gv, err)
	}
	m.clients[key] = c
	return c, nil
}

// Custom returns the shared informer of a custom resource decoded from JSON into
// the user's own Go struct, without generated code (reflector.FromJSON): the
// struct embeds metav1.TypeMeta and metav1.ObjectMeta and has a hand-written
// DeepCopyObject (see reflector.JSONObject). gvk names the resource's group,
// version and kind; the kind must be the struct's type name.
//
//	foos, err := manager.Custom[*Foo](m, schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Foo"}, manager.Options[*Foo]{})
func Custom[T reflector.JSONObject[E], E any](m *Manager, gvk schema.GroupVersionKind, o Options[T]) (*informer.Informer[T], error) {
	if name := reflect.TypeFor[E]().Name(); gvk.Kind != name {
		return nil, fmt.Errorf("manager: Custom of kind %q decodes into %s: the kind must be the struct's name", gvk.Kind, reflect.TypeFor[E]())
	}
	mapping, err := m.mapping(gvk, o.Namespace)
	if err != nil {
		return nil, err
	}
	return shared(m, mapping, o, func() (reflector.ListerWatcher[T], error) {
		c, err := m.clientLocked(gvk.GroupVersion(), true)
		if err != nil {
			return nil, err
		}
		return reflector.FromJSON[T](c, mapping.Resource.Resource, o.Namespace), nil
	})
}
