package deltafifo

import "hash/maphash"

// keyCache remembers recent "namespace/name" keys so that a delta for a key seen
// lately builds no string: a 4-way set-associative table of keyCacheSets sets,
// filled on first use. A hit costs two string hashes and a few comparisons; a miss
// builds the key as the default key function would and keeps it in place of the
// least recently used way of its set. Memory is bounded: the table (64 KiB) plus the
// keys it holds. The zero value is an empty cache. It is not safe for concurrent use.
type keyCache struct {
	seed maphash.Seed
	sets []keySet4 // nil until first used
}

// keySet4 is one set of keyCache, most recently used first.
type keySet4 struct{ keys [4]string }

const keyCacheSets = 1024

// get returns the key of an object named name in namespace ns ("" for cluster-scoped
// objects): ns + "/" + name, or name.
func (c *keyCache) get(ns, name string) string {
	if c.sets == nil {
		c.seed = maphash.MakeSeed()
		c.sets = make([]keySet4, keyCacheSets)
	}
	h := maphash.String(c.seed, name)
	if ns != "" {
		h ^= maphash.String(c.seed, ns) * 0x9e3779b97f4a7c15
	}
	set := &c.sets[h&(keyCacheSets-1)]
	for i, k := range set.keys {
		if isKey(k, ns, name) {
			copy(set.keys[1:i+1], set.keys[:i])
			set.keys[0] = k
			return k
		}
	}
	k := name
	if ns != "" {
		k = ns + "/" + name
	}
	copy(set.keys[1:], set.keys[:3])
	set.keys[0] = k
	return k
}

// isKey reports whether k is the key of name in namespace ns, without building it.
func isKey(k, ns, name string) bool {
	if ns == "" {
		return k == name
	}
	return len(k) == len(ns)+1+len(name) && k[len(ns)] == '/' && k[:len(ns)] == ns && k[len(ns)+1:] == name
}
