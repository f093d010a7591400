//go:build !(amd64 || arm64 || 386 || ppc64 || ppc64le || s390x)

package indexer

import "unsafe"

// putShort copies s to p, which has room for it. On these machines a word may not
// be loaded from any address: it is copy (putshort_words.go moves words).
func putShort(p unsafe.Pointer, s string) {
	copy(unsafe.Slice((*byte)(p), len(s)), s)
}
