package reflector

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// This file reads the protobuf wire format of the Kubernetes API just far
// enough to find objects and their identity without decoding them:
//
//   - A protobuf body is the 4 bytes "k8s\x00" followed by a runtime.Unknown
//     message: typeMeta (1: apiVersion 1, kind 2), raw (2) holding the object's
//     own message, contentEncoding (3), contentType (4).
//   - A list's message holds its ListMeta in field 1 (resourceVersion 2,
//     continue 3, remainingItemCount 4, shardInfo 5 with its selector in 1)
//     and one item message per field 2.
//   - A watch stream is a sequence of frames, each a 4-byte big-endian length
//     and a metav1.WatchEvent message: type (1) and object (2), a RawExtension
//     whose raw (1) is a protobuf body as above.
//   - An object's ObjectMeta is its field 1: name 1, namespace 3,
//     resourceVersion 6.
//
// Nothing here panics or allocates in proportion to a length it has not
// checked against the bytes at hand.

// protoMagic starts every protobuf body the API server sends.
var protoMagic = []byte("k8s\x00")

// errWire wraps every malformed-input error of this file.
var errWire = errors.New("malformed protobuf")

func wireErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errWire, fmt.Sprintf(format, args...))
}

// wireField is one field of a protobuf message.
type wireField struct {
	num  uint64
	typ  byte   // wire type: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32
	u    uint64 // value of a varint
	data []byte // value of a length-delimited field, aliasing the message
}

// nextField reads the field at the start of b and returns it with the bytes
// that follow it.
func nextField(b []byte) (wireField, []byte, error) {
	var f wireField
	tag, n := binary.Uvarint(b)
	if n <= 0 {
		return f, nil, wireErr("bad field tag")
	}
	b = b[n:]
	f.num, f.typ = tag>>3, byte(tag&7)
	if f.num == 0 || f.num > 1<<29-1 {
		return f, nil, wireErr("field number %d", f.num)
	}
	switch f.typ {
	case 0:
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return f, nil, wireErr("bad varint in field %d", f.num)
		}
		f.u, b = v, b[n:]
	case 1:
		if len(b) < 8 {
			return f, nil, wireErr("truncated fixed64 in field %d", f.num)
		}
		b = b[8:]
	case 2:
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return f, nil, wireErr("bad length in field %d", f.num)
		}
		b = b[n:]
		f.data, b = b[:l:l], b[l:]
	case 5:
		if len(b) < 4 {
			return f, nil, wireErr("truncated fixed32 in field %d", f.num)
		}
		b = b[4:]
	default:
		return f, nil, wireErr("wire type %d in field %d", f.typ, f.num)
	}
	return f, b, nil
}

// envelope is a protobuf body's runtime.Unknown: the kind of the object and
// its message.
type envelope struct {
	apiVersion, kind []byte
	raw              []byte
}

// readEnvelope reads a protobuf body: the magic prefix and a
// runtime.Unknown holding an unencoded (not gzipped) object.
func readEnvelope(b []byte) (envelope, error) {
	var e envelope
	if !bytes.HasPrefix(b, protoMagic) {
		return e, wireErr("no %q prefix", protoMagic)
	}
	b = b[len(protoMagic):]
	for len(b) > 0 {
		f, rest, err := nextField(b)
		if err != nil {
			return e, err
		}
		b = rest
		if f.typ != 2 {
			continue
		}
		switch f.num {
		case 1:
			if err := e.readTypeMeta(f.data); err != nil {
				return e, err
			}
		case 2:
			e.raw = f.data
		case 3:
			if len(f.data) > 0 {
				return e, wireErr("unsupported content encoding %q", f.data)
			}
		}
	}
	return e, nil
}

// readTypeMeta reads the envelope's typeMeta field: its apiVersion and kind.
// As with decoding, the last occurrence of a field wins.
func (e *envelope) readTypeMeta(tm []byte) error {
	for len(tm) > 0 {
		g, rest, err := nextField(tm)
		if err != nil {
			return err
		}
		tm = rest
		switch {
		case g.num == 1 && g.typ == 2:
			e.apiVersion = g.data
		case g.num == 2 && g.typ == 2:
			e.kind = g.data
		}
	}
	return nil
}

// wireKey is what identifies one version of an object.
type wireKey struct {
	namespace, name, resourceVersion []byte
}

// readKey reads the namespace, name and resourceVersion from an object's
// message, skipping everything else. ok is false when the message holds no
// metadata or more than one (protobuf would merge them: only a full decode
// tells the result). As with decoding, the last occurrence of a string
// field wins.
func readKey(obj []byte) (k wireKey, ok bool, err error) {
	var meta []byte
	seen := false
	for b := obj; len(b) > 0; {
		f, rest, err := nextField(b)
		if err != nil {
			return k, false, err
		}
		b = rest
		if f.num == 1 {
			if f.typ != 2 || seen {
				return k, false, nil
			}
			meta, seen = f.data, true
		}
	}
	if !seen {
		return k, false, nil
	}
	for b := meta; len(b) > 0; {
		f, rest, err := nextField(b)
		if err != nil {
			return k, false, err
		}
		b = rest
		if f.typ != 2 {
			continue
		}
		switch f.num {
		case 1:
			k.name = f.data
		case 3:
			k.namespace = f.data
		case 6:
			k.resourceVersion = f.data
		}
	}
	return k, true, nil
}

// listBody is a list message's metadata, and its items when the message is
// read whole (the tests' reference reader).
type listBody struct {
	resourceVersion, continueToken []byte
	remaining                      *int64
	shardInfo                      *metav1.ShardInfo // ListMeta field 5 (KEP-5866)
	// items are the item messages, aliasing the message.
	items [][]byte
}

// readListMeta reads a list's ListMeta field into l. As with decoding, the
// last occurrence of a field wins.
func (l *listBody) readListMeta(m []byte) error {
	for len(m) > 0 {
		g, rest, err := nextField(m)
		if err != nil {
			return err
		}
		m = rest
		switch {
		case g.num == 2 && g.typ == 2:
			l.resourceVersion = g.data
		case g.num == 3 && g.typ == 2:
			l.continueToken = g.data
		case g.num == 4 && g.typ == 0:
			v := int64(g.u)
			l.remaining = &v
		case g.num == 5 && g.typ == 2:
			l.shardInfo = &metav1.ShardInfo{}
			for si := g.data; len(si) > 0; {
				h, rest, err := nextField(si)
				if err != nil {
					return err
				}
				si = rest
				if h.num == 1 && h.typ == 2 {
					l.shardInfo.Selector = string(h.data)
				}
			}
		}
	}
	return nil
}

// errTruncated is a stream that ended cleanly inside a field: the answer
// itself is cut short. A stream that breaks (the connection lost) returns its
// own error instead, io.ErrUnexpectedEOF for an HTTP body.
var errTruncated = wireErr("truncated message")

// streamField is the head of a field read from a stream: for a varint its
// value, for a length-delimited field its length (the bytes are not read).
type streamField struct {
	num uint64
	typ byte
	u   uint64 // the varint's value, or the length-delimited field's length
	n   uint64 // bytes of the head (tag, and varint or length)
}

// streamReader reads protobuf fields from a stream, for the answers read as
// they arrive (see protoListFrom). It checks what nextField checks, and
// allocates for a length-delimited field only as its bytes arrive.
type streamReader struct {
	r   *bufio.Reader
	pos uint64 // bytes read so far
}

// uvarint reads a varint of at most limit bytes as binary.Uvarint does, with
// n its bytes; err is io.EOF only when the stream ends before its first byte.
func (sr *streamReader) uvarint(limit uint64) (v uint64, n uint64, err error) {
	for shift := uint(0); ; shift += 7 {
		if n == limit {
			return 0, n, errTruncated
		}
		c, err := sr.r.ReadByte()
		if err != nil {
			if err == io.EOF && n > 0 {
				err = errTruncated
			}
			return 0, n, err
		}
		n++
		sr.pos++
		if c < 0x80 {
			if n == binary.MaxVarintLen64 && c > 1 {
				return 0, n, wireErr("varint overflows 64 bits")
			}
			return v | uint64(c)<<shift, n, nil
		}
		if n == binary.MaxVarintLen64 {
			return 0, n, wireErr("varint overflows 64 bits")
		}
		v |= uint64(c&0x7f) << shift
	}
}

// field reads a field's head and, unless it is length-delimited, its value;
// limit bounds the field's bytes. err is io.EOF at a clean end of the stream,
// wraps errWire when the field is malformed or cut short (errTruncated), and
// is the stream's own error when it breaks.
func (sr *streamReader) field(limit uint64) (streamField, error) {
	var f streamField
	if limit == 0 {
		return f, io.EOF
	}
	tag, n, err := sr.uvarint(limit)
	if err != nil {
		if errors.Is(err, errWire) {
			return f, wireErr("bad field tag")
		}
		return f, err
	}
	f.n = n
	f.num, f.typ = tag>>3, byte(tag&7)
	if f.num == 0 || f.num > 1<<29-1 {
		return f, wireErr("field number %d", f.num)
	}
	switch f.typ {
	case 0, 2:
		v, n, err := sr.uvarint(limit - f.n)
		f.n += n
		switch {
		case errors.Is(err, errWire):
			return f, wireErr("bad varint or length in field %d", f.num)
		case err == io.EOF:
			return f, errTruncated
		case err != nil:
			return f, err
		case f.typ == 2 && v > limit-f.n:
			return f, wireErr("bad length in field %d", f.num)
		}
		f.u = v
	case 1, 5:
		size := uint64(8)
		if f.typ == 5 {
			size = 4
		}
		if size > limit-f.n {
			return f, wireErr("truncated fixed%d in field %d", 8*size, f.num)
		}
		if err := sr.skip(size); err != nil {
			return f, err
		}
		f.n += size
	default:
		return f, wireErr("wire type %d in field %d", f.typ, f.num)
	}
	return f, nil
}

// readChunk is the most a streamReader reads into a buffer before it has
// the bytes: a length the stream claims is believed only as far as it holds.
const readChunk = 1 << 20

// read reads n bytes into buf, reusing its memory, and returns them.
func (sr *streamReader) read(n uint64, buf []byte) ([]byte, error) {
	buf = buf[:0]
	for uint64(len(buf)) < n {
		k := len(buf)
		chunk := int(min(n-uint64(k), readChunk))
		buf = slices.Grow(buf, chunk)[:k+chunk]
		for i := k; i < len(buf); {
			m, err := sr.r.Read(buf[i:])
			i += m
			sr.pos += uint64(m)
			if err != nil && i < len(buf) {
				if err == io.EOF {
					err = errTruncated
				}
				return buf[:i], err
			}
		}
	}
	return buf, nil
}

// skip reads and drops n bytes.
func (sr *streamReader) skip(n uint64) error {
	for n > 0 {
		k, err := sr.r.Discard(int(min(n, 1<<30)))
		n -= uint64(k)
		sr.pos += uint64(k)
		if err != nil {
			if err == io.EOF {
				err = errTruncated
			}
			return err
		}
	}
	return nil
}

// readWatchEvent reads a watch frame's metav1.WatchEvent: its type and the
// protobuf body of its object.
func readWatchEvent(b []byte) (typ, object []byte, err error) {
	for len(b) > 0 {
		f, rest, err := nextField(b)
		if err != nil {
			return nil, nil, err
		}
		b = rest
		if f.typ != 2 {
			continue
		}
		switch f.num {
		case 1:
			typ = f.data
		case 2:
			object = nil
			for r := f.data; len(r) > 0; {
				g, rest, err := nextField(r)
				if err != nil {
					return nil, nil, err
				}
				r = rest
				if g.num == 1 && g.typ == 2 {
					object = g.data
				}
			}
		}
	}
	return typ, object, nil
}

// maxFrame bounds the length of one watch frame: one object, which etcd
// limits to a few megabytes (1.5 MiB by default). A longer frame ends the
// watch with a wire error. The limit caps the memory a frame may take, not
// what a header may make the reader set aside: the buffer grows with the
// bytes that arrive (frameReader.fill).
const maxFrame = 64 << 20

// frameChunk is the first size the buffer of a frameReader grows to when a
// frame does not fit it; it doubles from there as the bytes arrive.
const frameChunk = 64 << 10

// frameReader splits a protobuf watch stream into frames. The frame it
// returns is valid until the next call: its buffer is reused. The buffer
// keeps the capacity of the largest frame read.
type frameReader struct {
	r   io.Reader
	buf []byte
	hdr [4]byte
}

// ready reports whether the whole next frame is buffered, so that next will
// not wait for the stream. It is false when the reader is not a *bufio.Reader.
func (f *frameReader) ready() bool {
	br, ok := f.r.(*bufio.Reader)
	if !ok || br.Buffered() < len(f.hdr) {
		return false
	}
	hdr, err := br.Peek(len(f.hdr))
	if err != nil {
		return false
	}
	return uint64(br.Buffered()) >= uint64(len(f.hdr))+uint64(binary.BigEndian.Uint32(hdr))
}

// next returns the next frame, io.EOF at a clean end of the stream and
// io.ErrUnexpectedEOF when it ends inside a frame.
func (f *frameReader) next() ([]byte, error) {
	if _, err := io.ReadFull(f.r, f.hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(f.hdr[:])
	if n > maxFrame {
		return nil, wireErr("watch frame of %d bytes exceeds the limit of %d", n, maxFrame)
	}
	if err := f.fill(int(n)); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return f.buf, nil
}

// fill reads the n bytes of a frame into f.buf. A frame longer than the
// buffer grows it as its bytes arrive, doubling from frameChunk up to n, so
// a header that claims more than the stream holds costs about twice what
// the stream sent, never what the header claimed. The copies cost O(n).
func (f *frameReader) fill(n int) error {
	f.buf = f.buf[:0]
	for len(f.buf) < n {
		if len(f.buf) == cap(f.buf) {
			grown := make([]byte, len(f.buf), min(n, max(2*cap(f.buf), frameChunk)))
			copy(grown, f.buf)
			f.buf = grown
		}
		k, err := io.ReadFull(f.r, f.buf[len(f.buf):min(n, cap(f.buf))])
		f.buf = f.buf[:len(f.buf)+k]
		if err != nil {
			if err == io.EOF && len(f.buf) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// withoutManagedFields returns obj, an object's message, without the
// managedFields (17) of its ObjectMeta, the message's first field (1), so
// that they are not decoded: obj itself when it has none, else a copy built
// in *buf, which it reuses (the decoders of the API types copy what they
// keep). Malformed input is returned as it is, for the decoder to report. A
// second ObjectMeta field later in the message, which the server never
// sends, is copied as it is (the Transform then strips what it holds).
func withoutManagedFields(obj []byte, buf *[]byte) []byte {
	if len(obj) < 2 || obj[0] != 1<<3|2 {
		return obj
	}
	l, n := binary.Uvarint(obj[1:])
	if n <= 0 || l > uint64(len(obj)-1-n) {
		return obj
	}
	start := 1 + n
	meta := obj[start : start+int(l)]
	kept, found := 0, false
	for i := 0; i < len(meta); {
		num, end := skipField(meta, i)
		if end < 0 {
			return obj
		}
		if num == 17 {
			found = true
		} else {
			kept += end - i
		}
		i = end
	}
	if !found {
		return obj
	}
	out := append((*buf)[:0], 1<<3|2)
	out = binary.AppendUvarint(out, uint64(kept))
	for i := 0; i < len(meta); {
		num, end := skipField(meta, i) // read above
		if num != 17 {
			out = append(out, meta[i:end]...)
		}
		i = end
	}
	out = append(out, obj[start+len(meta):]...)
	*buf = out
	return out
}

// skipField reads the tag of the field at b[i:], which is not empty, and
// returns its number and the index just past the field, or end -1 if the
// field is malformed. Tags and lengths below 128, one byte, are read inline.
func skipField(b []byte, i int) (num uint64, end int) {
	tag := uint64(b[i])
	if tag < 0x80 {
		i++
	} else {
		t, n := binary.Uvarint(b[i:])
		if n <= 0 {
			return 0, -1
		}
		tag, i = t, i+n
	}
	switch tag & 7 {
	case 0:
		_, n := binary.Uvarint(b[i:])
		if n <= 0 {
			return 0, -1
		}
		return tag >> 3, i + n
	case 1:
		i += 8
	case 2:
		if i < len(b) && b[i] < 0x80 {
			i += 1 + int(b[i])
			break
		}
		l, n := binary.Uvarint(b[i:])
		if n <= 0 || l > uint64(len(b)-i-n) {
			return 0, -1
		}
		return tag >> 3, i + n + int(l)
	case 5:
		i += 4
	default:
		return 0, -1
	}
	if i > len(b) {
		return 0, -1
	}
	return tag >> 3, i
}
