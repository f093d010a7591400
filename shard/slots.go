package shard

import (
	"encoding/binary"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	"github.com/ctrlkit/ctrlkit/reflector"
)

// The slots of the hash space: their ranges, and their assignment to the
// members by rendezvous hashing.

// shardOf returns the reflector.Shard of a set of slots, adjacent slots merged
// into one range.
func (m *Member) shardOf(slots map[int]bool) reflector.Shard {
	s := reflector.Shard{Field: m.cfg.Field}
	n := uint64(m.cfg.Slots)
	for i := 0; i < m.cfg.Slots; i++ {
		if !slots[i] {
			continue
		}
		j := i
		for j+1 < m.cfg.Slots && slots[j+1] {
			j++
		}
		s.Ranges = append(s.Ranges, reflector.Range{Start: slotStart(i, n), End: slotStart(j+1, n)})
		i = j
	}
	return s
}

// slotStart is where slot i of n begins; slot n begins at 2^64, written 0.
func slotStart(i int, n uint64) uint64 {
	if uint64(i) >= n {
		return 0
	}
	// i * 2^64 / n without overflow.
	q, r := ^uint64(0)/n, ^uint64(0)%n+1
	return uint64(i)*q + (uint64(i)*r)/n
}

// SlotOf returns the slot of a hash among n slots (the inverse of the ranges
// shardOf writes).
func SlotOf(h uint64, n int) int {
	lo, hi := 0, n-1
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if slotStart(mid, uint64(n)) <= h {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// assign returns the owner of each slot among members: rendezvous hashing
// with bounded loads. Pairs (slot, member) are taken by score, highest
// first, and a member takes no more than its fair share: the shares differ
// by at most one slot (plain
// rendezvous hashing leaves one member of four with 28% of 64 slots), and a
// join or leave still moves about 1/N of them, nearly all to or from the
// member that came or went. Every member computes the same from the same
// members.
func assign(slots int, members []string) []string {
	owners := make([]string, slots)
	if len(members) == 0 {
		return owners
	}
	type pair struct {
		slot, member int
		score        uint64
	}
	pairs := make([]pair, 0, slots*len(members))
	for s := range slots {
		for i, mb := range members {
			pairs = append(pairs, pair{s, i, score(s, mb)})
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		switch {
		case a.score != b.score:
			return cmpDesc(a.score, b.score)
		case a.slot != b.slot:
			return a.slot - b.slot
		}
		return a.member - b.member
	})
	// Each member takes slots/N, and the first slots%N members to want one
	// more take one more.
	fair, extra := slots/len(members), slots%len(members)
	load := make([]int, len(members))
	for _, p := range pairs {
		if owners[p.slot] != "" {
			continue
		}
		switch {
		case load[p.member] < fair:
		case load[p.member] == fair && extra > 0:
			extra--
		default:
			continue
		}
		owners[p.slot] = members[p.member]
		load[p.member]++
	}
	return owners
}

func cmpDesc(a, b uint64) int {
	if a > b {
		return -1
	}
	return 1
}

func score(slot int, member string) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(slot))
	h.Write(b[:])
	h.Write([]byte(member))
	x := h.Sum64()
	// Finalize: FNV's high bits move little with the last bytes.
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return x
}

func copySet(m map[int]bool) map[int]bool {
	out := make(map[int]bool, len(m))
	for k, v := range m {
		if v {
			out[k] = true
		}
	}
	return out
}

func formatSlots(s map[int]bool) string {
	keys := make([]int, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = strconv.Itoa(k)
	}
	return strings.Join(parts, ",")
}

func parseSlots(v string) map[int]bool {
	out := map[int]bool{}
	for _, p := range strings.Split(v, ",") {
		if n, err := strconv.Atoi(p); err == nil {
			out[n] = true
		}
	}
	return out
}
