package manager

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The auth gate's cache (HTTPConfig documents these numbers).
const (
	allowedTTL    = 30 * time.Second
	refusedTTL    = 10 * time.Second
	decisionLimit = 4096
	// reviewTimeout bounds one TokenReview or SubjectAccessReview.
	reviewTimeout = 10 * time.Second
)

// authGate admits a request to the metrics and pprof servers when the API
// server authenticates its bearer token (TokenReview) and allows the user to
// get its path (SubjectAccessReview of a non-resource URL). Its answers are
// cached by token, verb and path. It is safe for concurrent use.
type authGate struct {
	client kubernetes.Interface
	log    logr.Logger
	// decisions maps a decisionKey to the answer's status code (200, 401 or
	// 403); errors are not cached. The cache is goroutine-safe, LRU-bounded to
	// decisionLimit entries, and each entry expires on its own.
	decisions *cache.LRUExpireCache
}

// decisionKey identifies a cached answer. The token is kept only as its hash.
type decisionKey struct {
	token      [sha256.Size]byte
	verb, path string
}

// errReview is what the gate's logs wrap when the API server could not answer.
var errReview = errors.New("manager: review failed")

// authRESTConfig is the configuration of the auth gate's client: the user's
// own, without the tracking of writes (a review is not a write a leader hands
// over), in JSON.
func (m *Manager) authRESTConfig() *rest.Config {
	cfg := rest.CopyConfig(m.cfg.RESTConfig)
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	cfg.ContentType, cfg.AcceptContentTypes = "application/json", "application/json"
	return cfg
}

// newAuthGate makes a gate that asks the API server of cfg.
func newAuthGate(cfg *rest.Config, log logr.Logger) (*authGate, error) {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("manager: auth client: %w", err)
	}
	return newGate(client, log), nil
}

func newGate(client kubernetes.Interface, log logr.Logger) *authGate {
	return &authGate{client: client, log: log, decisions: cache.NewLRUExpireCache(decisionLimit)}
}

// wrap serves next to the requests the gate admits and answers the others
// 401, 403 or 503, with no reason.
func (g *authGate) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, err := g.decide(r.Context(), bearerToken(r), verbOf(r.Method), r.URL.Path)
		switch code {
		case http.StatusOK:
			next.ServeHTTP(w, r)
		case http.StatusUnauthorized:
			w.Header().Set("WWW-Authenticate", `Bearer realm="ctrlkit"`)
			writeText(w, code, "Unauthorized\n")
		case http.StatusForbidden:
			writeText(w, code, "Forbidden\n")
		default:
			g.log.Error(err, "could not authenticate or authorize a request", "path", r.URL.Path, "remote", r.RemoteAddr)
			writeText(w, http.StatusServiceUnavailable, "Service Unavailable\n")
		}
	})
}

// decide returns 200 if the user of token may verb path, 401 if the token is
// missing or not authenticated, 403 if its user may not; or 0 and the error
// when the API server could not answer.
func (g *authGate) decide(ctx context.Context, token, verb, path string) (int, error) {
	if token == "" {
		return http.StatusUnauthorized, nil
	}
	key := decisionKey{token: sha256.Sum256([]byte(token)), verb: verb, path: path}
	if code, ok := g.decisions.Get(key); ok {
		return code.(int), nil
	}
	code, err := g.review(ctx, token, verb, path)
	if err != nil {
		return 0, err
	}
	ttl := refusedTTL
	if code == http.StatusOK {
		ttl = allowedTTL
	}
	g.decisions.Add(key, code, ttl)
	return code, nil
}

// review asks the API server about a request: a TokenReview, then, if the
// token is authenticated, a SubjectAccessReview.
func (g *authGate) review(ctx context.Context, token, verb, path string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	tr, err := g.client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token},
	}, metav1.CreateOptions{})
	if err != nil {
		return 0, fmt.Errorf("%w: TokenReview: %w", errReview, err)
	}
	if !tr.Status.Authenticated {
		return http.StatusUnauthorized, nil
	}
	u := tr.Status.User
	spec := authorizationv1.SubjectAccessReviewSpec{
		User:                  u.Username,
		UID:                   u.UID,
		Groups:                u.Groups,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
	}
	if len(u.Extra) > 0 {
		spec.Extra = make(map[string]authorizationv1.ExtraValue, len(u.Extra))
		for k, v := range u.Extra {
			spec.Extra[k] = authorizationv1.ExtraValue(v)
		}
	}
	sar, err := g.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		return 0, fmt.Errorf("%w: SubjectAccessReview of %q: %w", errReview, u.Username, err)
	}
	if !sar.Status.Allowed || sar.Status.Denied {
		return http.StatusForbidden, nil
	}
	return http.StatusOK, nil
}

// bearerToken returns the token of r's "Authorization: Bearer" header, or "".
func bearerToken(r *http.Request) string {
	scheme, token, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// verbOf is the authorization verb of an HTTP method on a non-resource URL, as
// the API server's own request filters name it.
func verbOf(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead:
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	}
	return strings.ToLower(method)
}
