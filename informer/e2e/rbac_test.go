//go:build e2e

package e2e

import (
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/testrun"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// TestNamespaceScopedUser: a user allowed only to list and watch the ConfigMaps
// of one namespace syncs that namespace and follows its changes; the same user is
// refused another namespace, with the typed error.
func TestNamespaceScopedUser(t *testing.T) {
	ctx := t.Context()
	ns := env.Namespace(t)
	createConfigMaps(t, ns, 25, 5)
	grant(t, ns, userNSReader, "list", "watch")
	user := clientsetFor(t, userNSReader)

	inf := informer.New(reflector.FromTyped(user.CoreV1().ConfigMaps(ns)), informer.Config[configMap]{})
	rec := newChecker[configMap]()
	mustAdd(t, inf, rec, informer.HandlerOptions{})
	testrun.Run(t, inf.Run)
	waitInSync(t, converge, serverVersions(t, ns), inf, rec)

	c := admin(t).CoreV1().ConfigMaps(ns)
	if err := c.Delete(ctx, "cm-3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Update(ctx, newConfigMap("cm-4", 44), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	created, err := c.Create(ctx, newConfigMap("extra", 1), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := inf.WaitForResourceVersion(ctx, created.ResourceVersion); err != nil {
		t.Fatal(err)
	}
	waitInSync(t, converge, serverVersions(t, ns), inf, rec)
	rec.check(t, "handler")
	if h := inf.Health(); h.Stats.Failures != 0 || h.State != reflector.StateWatching {
		t.Errorf("health = %+v", h)
	}

	// Everywhere else the user is forbidden.
	onError, errs := testrun.Errors()
	other := informer.New(reflector.FromTyped(user.CoreV1().ConfigMaps("default")), informer.Config[configMap]{OnError: onError})
	testrun.Run(t, other.Run)
	select {
	case err := <-errs:
		if !errors.Is(err, reflector.ErrForbidden) {
			t.Errorf("error in another namespace = %v, want ErrForbidden", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no error within 10s in a namespace the user may not read")
	}
}

// TestUserWithoutWatch: a user who may list but not watch gets the typed error
// within seconds, through OnError and Health, instead of a silent retry loop;
// with paginated lists it still syncs.
func TestUserWithoutWatch(t *testing.T) {
	for _, mode := range []reflector.WatchListMode{reflector.WatchListAuto, reflector.WatchListOff} {
		t.Run(mode.String(), func(t *testing.T) {
			ns := env.Namespace(t)
			createConfigMaps(t, ns, 10, 5)
			grant(t, ns, userLister, "list")
			onError, errs := testrun.Errors()
			inf := informer.New(reflector.FromTyped(clientsetFor(t, userLister).CoreV1().ConfigMaps(ns)), informer.Config[configMap]{
				OnError:   onError,
				Reflector: reflector.Config[configMap]{WatchList: mode},
			})
			start := time.Now()
			testrun.Run(t, inf.Run)
			var err error
			select {
			case err = <-errs:
			case <-time.After(10 * time.Second):
				t.Fatalf("no error within 10s; health %+v", inf.Health())
			}
			var access *reflector.AccessError
			if !errors.As(err, &access) || !errors.Is(err, reflector.ErrForbidden) || access.Verb != "watch" {
				t.Fatalf("error = %v, want a forbidden watch", err)
			}
			t.Logf("typed error after %v: %v", time.Since(start).Round(time.Millisecond), err)
			if h := inf.Health(); !errors.Is(h.LastError, reflector.ErrForbidden) {
				t.Errorf("health = %+v", h)
			}
			if mode == reflector.WatchListOff {
				// The list itself is allowed.
				if err := inf.WaitForSync(t.Context()); err != nil {
					t.Fatal(err)
				}
				waitInSync(t, converge, serverVersions(t, ns), inf)
			} else if inf.HasSynced() {
				t.Error("synced although the streaming list needs watch")
			}
		})
	}
}
