// Package discoverytest serves the discovery documents of an API server, and
// nothing else, so that a manager.Manager can look resources up (its informer
// functions do) in unit tests that need no real cluster. Every other request is
// answered 404.
package discoverytest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// Resource is one resource the server says it serves.
type Resource struct {
	GVK        schema.GroupVersionKind
	Plural     string
	Namespaced bool
}

// Serve starts a loopback HTTP server answering the discovery requests (/api,
// /apis and each group version's resource list) for resources, and returns a
// rest.Config for it. The server stops when the test ends.
func Serve(t testing.TB, resources ...Resource) *rest.Config {
	t.Helper()
	docs := map[string]any{}
	core := &metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"}}
	groups := &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}}
	lists := map[schema.GroupVersion]*metav1.APIResourceList{
		{Version: "v1"}: {TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: "v1"},
	}
	for _, r := range resources {
		gv := r.GVK.GroupVersion()
		l := lists[gv]
		if l == nil {
			l = &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv.String()}
			lists[gv] = l
			v := metav1.GroupVersionForDiscovery{GroupVersion: gv.String(), Version: gv.Version}
			i := groupIndex(groups, gv.Group)
			if i < 0 {
				groups.Groups = append(groups.Groups, metav1.APIGroup{Name: gv.Group, PreferredVersion: v})
				i = len(groups.Groups) - 1
			}
			groups.Groups[i].Versions = append(groups.Groups[i].Versions, v)
		}
		l.APIResources = append(l.APIResources, metav1.APIResource{
			Name: r.Plural, Kind: r.GVK.Kind, Namespaced: r.Namespaced,
			Verbs: metav1.Verbs{"get", "list", "watch", "create", "update", "patch", "delete"},
		})
	}
	for gv, l := range lists {
		if gv.Group == "" {
			docs["/api/"+gv.Version] = l
		} else {
			docs["/apis/"+gv.String()] = l
		}
	}
	docs["/api"] = core
	docs["/apis"] = groups
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		doc, ok := docs[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(doc)
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL}
}

func groupIndex(l *metav1.APIGroupList, name string) int {
	for i, g := range l.Groups {
		if g.Name == name {
			return i
		}
	}
	return -1
}
