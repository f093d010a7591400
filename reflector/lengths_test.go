package reflector

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"
	"testing/iotest"
)

// A frame header that claims the largest frame allowed, followed by a few bytes and the end
// of the stream, costs about what arrived, not what the header claimed.
func TestFrameReaderAllocatesWithTheBytesReceived(t *testing.T) {
	var stream bytes.Buffer
	binary.Write(&stream, binary.BigEndian, uint32(maxFrame))
	stream.WriteString("0123456789")
	f := frameReader{r: bytes.NewReader(stream.Bytes())}

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := f.next()
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("next = %v, want io.ErrUnexpectedEOF", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 4*frameChunk {
		t.Fatalf("reading 10 bytes of a frame that claims %d allocated %d bytes, want at most %d", maxFrame, got, 4*frameChunk)
	}
	if cap(f.buf) > frameChunk {
		t.Fatalf("the buffer holds %d bytes after 10 arrived, want at most %d", cap(f.buf), frameChunk)
	}
}

// Frames of every size around the buffer's growth steps come back whole and in order, however
// the stream splits them, and the buffer ends no larger than the largest frame needs.
func TestFrameReaderReadsFramesOfAnySize(t *testing.T) {
	sizes := []int{0, 1, 10, frameChunk - 1, frameChunk, frameChunk + 1, 5, 3*frameChunk + 7, 2, 9 * frameChunk}
	var stream bytes.Buffer
	var frames [][]byte
	for i, n := range sizes {
		frame := bytes.Repeat([]byte{byte('a' + i)}, n)
		frames = append(frames, frame)
		binary.Write(&stream, binary.BigEndian, uint32(n))
		stream.Write(frame)
	}
	for name, r := range map[string]func([]byte) io.Reader{
		"whole": func(b []byte) io.Reader { return bytes.NewReader(b) },
		"half":  func(b []byte) io.Reader { return iotest.HalfReader(bytes.NewReader(b)) },
		"bytes": func(b []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) },
	} {
		f := frameReader{r: r(stream.Bytes())}
		for i, want := range frames {
			got, err := f.next()
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: frame %d (%d bytes): got %d bytes, %v", name, i, len(want), len(got), err)
			}
		}
		if _, err := f.next(); err != io.EOF {
			t.Fatalf("%s: after the last frame: %v, want io.EOF", name, err)
		}
		if cap(f.buf) != 9*frameChunk {
			t.Errorf("%s: buffer of %d bytes, want %d (the largest frame)", name, cap(f.buf), 9*frameChunk)
		}
	}

	// A stream that ends inside a frame that fits the buffer already.
	f := frameReader{r: bytes.NewReader(append(binary.BigEndian.AppendUint32(nil, 5), "abc"...)), buf: make([]byte, 0, 64)}
	if _, err := f.next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated small frame: %v, want io.ErrUnexpectedEOF", err)
	}
}

// A list's remainingItemCount is the server's claim: the items slice reserves room for a
// bounded number of them, and for no more than the claim.
func TestCapacityBelievesRemainingCountWithinReason(t *testing.T) {
	for _, tc := range []struct {
		first     int
		remaining *int64
		want      int
	}{
		{500, nil, 500},
		{500, ptr(int64(-3)), 500},
		{500, ptr(int64(1200)), 1700},
		{500, ptr(int64(1) << 40), 500 + maxGuessedItems},
	} {
		if got := capacity(tc.first, tc.remaining); got != tc.want {
			t.Errorf("capacity(%d, %v) = %d, want %d", tc.first, tc.remaining, got, tc.want)
		}
	}
}

func ptr[V any](v V) *V { return &v }
