package informer

import (
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// DepartedLimit is how many departures a sharded informer remembers (see
// DepartedUID).
const DepartedLimit = 16384

// departed remembers the UIDs of the last DepartedLimit objects that left a
// sharded informer's cache, oldest forgotten first.
type departed struct {
	mu   sync.Mutex
	uids map[string]types.UID
	ring []string // keys, in the order they left; next is the oldest slot
	next int
}

// record notes that key (of UID uid) left the cache.
func (d *departed) record(key string, uid types.UID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.uids == nil {
		d.uids = map[string]types.UID{}
	}
	key, uid = strings.Clone(key), types.UID(strings.Clone(string(uid))) // not the object's memory
	if _, ok := d.uids[key]; ok {
		d.uids[key] = uid // its slot in the ring stays where it was
		return
	}
	if len(d.ring) < DepartedLimit {
		d.ring = append(d.ring, key)
	} else {
		delete(d.uids, d.ring[d.next])
		d.ring[d.next] = key
		d.next = (d.next + 1) % DepartedLimit
	}
	d.uids[key] = uid
}

func (d *departed) get(key string) (types.UID, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	uid, ok := d.uids[key]
	return uid, ok
}

// DepartedUID returns the UID of the object of key ("namespace/name" or
// "name") if it left the cache (deleted, or out of the shard) while the
// informer was sharded (see SetShard), and is not back in it. Only the last
// DepartedLimit departures are remembered. A sharded controller asks it which
// replica owns a deleted object's key: the one whose shard holds the UID the
// object had.
func (inf *Informer[T]) DepartedUID(key string) (types.UID, bool) {
	if _, ok := inf.idx.Get(key); ok {
		return "", false
	}
	return inf.departed.get(key)
}
