package faultproxy_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/testenv/faultproxy"
)

// ExampleStart answers every LIST of ConfigMaps with 429 Too Many Requests, while
// other requests reach the server. In a test, upstream is testenv's Env.Config().
func ExampleStart() {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"kind":"ConfigMapList","metadata":{"resourceVersion":"7"},"items":[]}`)
	}))
	defer server.Close()
	upstream := &rest.Config{Host: server.URL}

	p, err := faultproxy.Start(context.Background(), upstream, faultproxy.Config{
		Rules: []faultproxy.Rule{{
			Resource: "configmaps",
			Status:   faultproxy.Status{Code: http.StatusTooManyRequests, Probability: 1, Verbs: []string{"list"}},
		}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()

	for _, path := range []string{"/api/v1/namespaces/default/configmaps", "/api/v1/namespaces/default/secrets"} {
		resp, err := http.Get(p.Config().Host + path)
		if err != nil {
			fmt.Println(err)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		fmt.Printf("%s %d Retry-After=%q\n", path, resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	fmt.Printf("%+v\n", p.Stats()["configmaps"])
	// Output:
	// /api/v1/namespaces/default/configmaps 429 Retry-After="1"
	// /api/v1/namespaces/default/secrets 200 Retry-After=""
	// {Delayed:0 Held:0 DroppedWatches:0 Statuses:1 StaleLists:0}
}
