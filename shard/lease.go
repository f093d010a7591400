package shard

import (
	"context"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Leases of a group: what a member reads of the others' and how it judges
// them live, and how it writes its own.

// sighting is what a member saw of one Lease: its version (resourceVersion
// and renewTime: any write changes one), and when, by this process's monotonic
// clock, it first saw that version.
type sighting struct {
	version string
	since   time.Time
	changed bool // seen to change since the first sighting
}

// observe records that the Lease l was read at now (after the answer came)
// and returns since when, by this process's clock, it has been unchanged, and
// whether it was seen to change. Requires Run's goroutine.
func (m *Member) observe(l *coordinationv1.Lease, now time.Time) (since time.Time, changed bool) {
	v := l.ResourceVersion
	if l.Spec.RenewTime != nil {
		v += "@" + l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
	}
	s, ok := m.seen[l.Name]
	if !ok || s.version != v {
		s = sighting{version: v, since: now, changed: ok}
		m.seen[l.Name] = s
	}
	return s.since, s.changed
}

// leaseDuration is how long a Lease counts live unchanged: what it states, at
// most MaxLeaseDuration, and this member's own when it states none.
func (m *Member) leaseDuration(l *coordinationv1.Lease) time.Duration {
	if l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds <= 0 {
		return m.cfg.LeaseDuration
	}
	return min(time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second, MaxLeaseDuration)
}

// read lists the group's Leases, others than this member's, each judged live
// by how long this member has seen it unchanged. A Lease seen for the first
// time counts as renewed now: a member that starts waits a LeaseDuration
// before it counts another's Lease expired. Requires Run's goroutine.
func (m *Member) read(ctx context.Context) ([]lease, error) {
	ctx, cancel := context.WithTimeout(ctx, m.requestTimeout())
	defer cancel()
	list, err := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: groupLabel + "=" + m.cfg.Group})
	if err != nil {
		return nil, fmt.Errorf("shard: list Leases: %w", err)
	}
	now := time.Now()
	var out []lease
	present := make(map[string]bool, len(list.Items))
	prefix := m.cfg.Group + "-"
	for i := range list.Items {
		l := &list.Items[i]
		present[l.Name] = true
		since, changed := m.observe(l, now)
		identity, ok := strings.CutPrefix(l.Name, prefix)
		if l.Name == m.name || !ok || identity == "" {
			continue // this member's own, or not a member's: no identity to assign slots to
		}
		if !(now.Sub(since) < m.leaseDuration(l)) {
			m.collect(ctx, l)
		}
		out = append(out, lease{
			identity: identity,
			live:     now.Sub(since) < m.leaseDuration(l),
			member:   changed && now.Sub(since) < m.leaseDuration(l),
			claimed:  parseSlots(l.Annotations[claimAnnotation]),
			held:     parseSlots(l.Annotations[holdAnnotation]),
		})
	}
	for name := range m.seen {
		if !present[name] {
			delete(m.seen, name)
		}
	}
	return out, nil
}

// write renews this member's Lease with its claims and holds. It returns when
// the write was sent (by this process's clock, with its monotonic reading), and
// ErrDuplicateIdentity once another process is found writing the Lease. A
// Lease left by an instance this member does not know (its predecessor, or a
// duplicate) is taken only once this member has seen it unchanged for its
// duration. Requires Run's goroutine.
func (m *Member) write(ctx context.Context, claimed, held map[int]bool) (renewed time.Time, err error) {
	m.lease <- struct{}{}
	defer func() { <-m.lease }()
	ctx, cancel := context.WithTimeout(ctx, m.requestTimeout())
	defer cancel()
	leases := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace)
	secs := int32((m.cfg.LeaseDuration + time.Second - 1) / time.Second)
	ann := map[string]string{claimAnnotation: formatSlots(claimed), holdAnnotation: formatSlots(held), instanceAnnotation: m.instance}
	cur, err := leases.Get(ctx, m.name, metav1.GetOptions{})
	sent := time.Now()
	now := metav1.NewMicroTime(sent)
	switch {
	case apierrors.IsNotFound(err):
		if m.wrote {
			// Deleted behind this member's back (by another instance that
			// left, say): written again, as a member that starts would.
			m.cfg.Logger.Info("shard Lease deleted while held: writing it again", "lease", m.name)
		}
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: m.name, Namespace: m.cfg.Namespace, Labels: map[string]string{groupLabel: m.cfg.Group}, Annotations: ann},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &m.cfg.Identity, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now},
		}, metav1.CreateOptions{})
	case err == nil:
		if cur.Annotations[instanceAnnotation] != m.instance {
			if m.wrote {
				return time.Time{}, ErrDuplicateIdentity
			}
			since, _ := m.observe(cur, time.Now())
			if m.foreignSince.IsZero() {
				m.foreignSince = since
			}
			if since.After(m.foreignSince) {
				return time.Time{}, ErrDuplicateIdentity // it changed while this member waited: another process renews it
			}
			if time.Since(since) < m.leaseDuration(cur) {
				return time.Time{}, fmt.Errorf("shard: Lease %s is held by another instance (a predecessor, or a replica of the same identity): waiting until it has been unchanged for %v", m.name, m.leaseDuration(cur))
			}
			cur.Spec.AcquireTime = &now
		}
		cur.Annotations = ann
		cur.Labels = map[string]string{groupLabel: m.cfg.Group}
		cur.Spec.HolderIdentity, cur.Spec.LeaseDurationSeconds, cur.Spec.RenewTime = &m.cfg.Identity, &secs, &now
		_, err = leases.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("shard: write Lease %s: %w", m.name, err)
	}
	m.wrote = true
	return sent, nil
}

// collect deletes the Lease l of another member, which this member has seen
// unchanged for its duration: that member stopped working on its slots before
// (at its RenewDeadline), and a member that joins now need not wait a
// LeaseDuration of its own to count it dead. The delete holds only if the Lease
// is still the version seen (a renewal since makes it fail); its member, if it
// comes back, writes it again. Errors are only logged.
func (m *Member) collect(ctx context.Context, l *coordinationv1.Lease) {
	opts := metav1.DeleteOptions{}
	if rv := l.ResourceVersion; rv != "" {
		opts.Preconditions = &metav1.Preconditions{ResourceVersion: &rv}
	}
	err := m.cfg.Client.CoordinationV1().Leases(l.Namespace).Delete(ctx, l.Name, opts)
	switch {
	case err == nil:
		m.cfg.Logger.Info("expired shard Lease deleted", "lease", l.Name)
		delete(m.seen, l.Name)
	case !apierrors.IsNotFound(err) && !apierrors.IsConflict(err):
		m.cfg.Logger.V(1).Info("deleting an expired shard Lease", "lease", l.Name, "err", err)
	}
}
