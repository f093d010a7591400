package reflector

import (
	"errors"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestClassify(t *testing.T) {
	tooLarge := apierrors.NewTimeoutError("Too large resource version: 10, current: 3", 1)
	tooLarge.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge}}
	legacyTooLarge := apierrors.NewTimeoutError("Too large resource version: 10, current: 3", 1)
	legacyCause := apierrors.NewTimeoutError("request did not complete", 1)
	legacyCause.ErrStatus.Details.Causes = []metav1.StatusCause{{Message: "Too large resource version"}}
	invalid := apierrors.NewInvalid(schema.GroupKind{Kind: "ListOptions"}, "", field.ErrorList{field.Forbidden(field.NewPath("sendInitialEvents"), "no")})
	for _, tc := range []struct {
		err  error
		want failureKind
	}{
		{apierrors.NewResourceExpired("too old resource version: 1"), failExpired},
		{apierrors.NewGone("gone"), failExpired},
		{fmt.Errorf("wrapped: %w", apierrors.NewResourceExpired("x")), failExpired},
		{tooLarge, failTooLarge},
		{legacyTooLarge, failTooLarge},
		{legacyCause, failTooLarge},
		{apierrors.NewTimeoutError("slow", 1), failTransient},
		{apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no")), failAccess},
		{apierrors.NewUnauthorized("who"), failAccess},
		{invalid, failUnsupported},
		{apierrors.NewBadRequest("bad"), failUnsupported},
		{apierrors.NewInternalError(errors.New("x")), failTransient},
		{apierrors.NewTooManyRequests("slow down", 3), failTransient},
		{errors.New("connection refused"), failTransient},
	} {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("classify(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestAccessError(t *testing.T) {
	cause := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("rbac says no"))
	var err error = &AccessError{Name: "cms", Verb: "watch", Reason: metav1.StatusReasonForbidden, Err: cause}
	err = fmt.Errorf("outer: %w", err)
	if !errors.Is(err, ErrForbidden) || errors.Is(err, ErrUnauthorized) {
		t.Error("sentinels do not match the reason")
	}
	var ae *AccessError
	if !errors.As(err, &ae) || ae.Verb != "watch" {
		t.Error("errors.As fails")
	}
	if !apierrors.IsForbidden(err) {
		t.Error("apierrors.IsForbidden does not see the cause")
	}
	const want = `outer: reflector: cms: watch refused (Forbidden): configmaps is forbidden: rbac says no`
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
	un := &AccessError{Reason: metav1.StatusReasonUnauthorized, Err: apierrors.NewUnauthorized("x")}
	if !errors.Is(un, ErrUnauthorized) || errors.Is(un, ErrForbidden) {
		t.Error("unauthorized sentinels")
	}
}

func TestSuggestedDelayIsHonoured(t *testing.T) {
	m := &machine[configMap]{r: New[configMap](Funcs[configMap]{}, newMemStore[configMap](), Config[configMap]{}), rand: fixedRand(0)}
	cfg, _ := m.r.cfg.validate()
	m.cfg = cfg
	m.backoff = newBackoff(cfg.Backoff)
	m.backoff.rand = fixedRand(0)
	s := m.fail("watch", apierrors.NewTooManyRequests("slow down", 7), watching{})
	if b, ok := s.(backingOff); !ok || b.delay != 7*time.Second {
		t.Errorf("state = %#v, want a 7s backoff (Retry-After)", s)
	}
	s = m.fail("watch", apierrors.NewTooManyRequests("slow down", 600), watching{})
	if b, ok := s.(backingOff); !ok || b.delay != 30*time.Second {
		t.Errorf("state = %#v, want the 30s cap", s)
	}
}
