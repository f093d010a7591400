package faultproxy

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"sync"
	"time"
)

// maxFrame bounds a protobuf watch frame; a longer length prefix is treated as a broken
// stream.
const maxFrame = 256 << 20

// frame is one watch event as read from the upstream.
type frame struct {
	data    []byte
	release time.Time // not written before
	held    bool
	gen     uint64 // resource.releases when held
}

// frames is the queue between a stream's reader and its writer. Safe for concurrent
// use.
type frames struct {
	mu    sync.Mutex
	queue []frame
	err   error         // why the upstream ended; set once, after the last frame
	wake  chan struct{} // capacity 1: queue or err changed
}

func (f *frames) push(fr frame) {
	f.mu.Lock()
	f.queue = append(f.queue, fr)
	f.mu.Unlock()
	f.signal()
}

func (f *frames) finish(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
	f.signal()
}

func (f *frames) signal() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// pop returns the next frame, or the upstream's end once every frame is out.
func (f *frames) pop() (frame, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.queue) > 0 {
		fr := f.queue[0]
		f.queue[0] = frame{}
		f.queue = f.queue[1:]
		return fr, true, nil
	}
	return frame{}, false, f.err
}

// splitter reads one frame from a watch body.
type splitter func(*bufio.Reader) ([]byte, error)

// splitterFor returns how to split a watch body of the content type, and the decoder of
// a frame's resourceVersion; nil for an encoding the proxy does not know.
func splitterFor(contentType string) (splitter, func([]byte) (string, bool)) {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return nil, nil
	}
	switch mt {
	case "application/json":
		return splitLine, jsonEventRV
	case "application/vnd.kubernetes.protobuf":
		return splitLength, protoEventRV
	}
	return nil, nil
}

// splitLine reads one newline-terminated JSON event.
func splitLine(br *bufio.Reader) ([]byte, error) {
	b, err := br.ReadBytes('\n')
	if len(b) > 0 && errors.Is(err, io.EOF) {
		return b, nil // a last event without newline; EOF comes on the next call
	}
	return b, err
}

// splitLength reads one frame of a 4-byte big-endian length and that many bytes, and
// returns both.
func splitLength(br *bufio.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("faultproxy: truncated frame header: %w", err)
		}
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxFrame {
		return nil, fmt.Errorf("faultproxy: watch frame of %d bytes exceeds %d", n, maxFrame)
	}
	b := make([]byte, 4+int(n))
	copy(b, hdr[:])
	if _, err := io.ReadFull(br, b[4:]); err != nil {
		return nil, fmt.Errorf("faultproxy: truncated frame: %w", io.ErrUnexpectedEOF)
	}
	return b, nil
}

// stream forwards a watch answer frame by frame, applying the rule's delays, holds and
// drops. n counts the watches of key before this one and seeds its delays. It returns
// when the upstream stream has ended and every frame is written, or when ctx ends; it
// panics with http.ErrAbortHandler to break the connection.
func (p *Proxy) stream(ctx context.Context, w http.ResponseWriter, resp *http.Response, key string, start Rule, n uint64) {
	flusher, _ := w.(http.Flusher)
	w.WriteHeader(resp.StatusCode)
	if flusher != nil {
		flusher.Flush()
	}
	split, rvOf := splitterFor(resp.Header.Get("Content-Type"))
	if split == nil {
		copyFlushing(w, flusher, resp.Body)
		return
	}

	q := &frames{wake: make(chan struct{}, 1)}
	p.work.Add(1)
	go func() {
		defer p.work.Done()
		p.read(bufio.NewReader(resp.Body), split, rvOf, key, p.streamRand(key, n), q)
	}()
	defer resp.Body.Close() // ends read

	var dropC <-chan time.Time
	if d := start.DropWatchAfter.After; d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		dropC = t.C
	}
	timer := time.NewTimer(0)
	<-timer.C
	defer timer.Stop()
	written := 0
	for {
		fr, ok, err := q.pop()
		if !ok {
			if err != nil && !errors.Is(err, io.EOF) {
				panic(http.ErrAbortHandler) // the upstream broke: so does the client's stream
			}
			if err != nil {
				return
			}
			select {
			case <-q.wake:
				continue
			case <-ctx.Done():
				return
			case <-dropC:
				p.drop(key)
			}
		}
		// Frames are written one after the other: a frame whose release time has passed
		// still waits for the one before it.
		if d := time.Until(fr.release); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return
			case <-dropC:
				p.drop(key)
			}
		}
		for fr.held {
			p.mu.Lock()
			free := p.resourceLocked(key).releases > fr.gen
			wake := p.release
			p.mu.Unlock()
			if free {
				break
			}
			select {
			case <-wake:
			case <-ctx.Done():
				return
			case <-dropC:
				p.drop(key)
			}
		}
		if _, err := w.Write(fr.data); err != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
		written++
		if m := start.DropWatchAfter.Events; m > 0 && written >= m {
			p.drop(key)
		}
	}
}

// streamRand returns the source of the delays of the watch of key that n watches of
// key preceded.
func (p *Proxy) streamRand(key string, n uint64) *rand.Rand {
	return rand.New(rand.NewPCG(p.seed, hashKey(key, n+1)))
}

// drop counts a dropped watch and breaks its connection.
func (p *Proxy) drop(key string) {
	p.mu.Lock()
	p.resourceLocked(key).stats.DroppedWatches++
	p.mu.Unlock()
	panic(http.ErrAbortHandler)
}

// read splits the upstream body into frames, decides each one's fate under the rule in
// force at its arrival, and queues it.
func (p *Proxy) read(br *bufio.Reader, split splitter, rvOf func([]byte) (string, bool), key string, rnd *rand.Rand, q *frames) {
	for {
		data, err := split(br)
		if err != nil {
			q.finish(err)
			return
		}
		arrival := time.Now()
		rv, hasRV := rvOf(data)
		fr := frame{data: data, release: arrival}
		p.mu.Lock()
		res := p.resourceLocked(key)
		rule := p.ruleLocked(key)
		if d := drawDelay(rnd, rule.DelayWatchEvents); d > 0 {
			fr.release = arrival.Add(d)
			res.stats.Delayed++
		}
		if rule.HoldWatchEvents {
			fr.held, fr.gen = true, res.releases
			res.stats.Held++
		}
		if hasRV {
			res.observe(rv, arrival)
		}
		p.mu.Unlock()
		q.push(fr)
	}
}

// drawDelay returns a delay in [d.Min, max(d.Min, d.Max)], drawing from rnd only when
// the delay is not zero.
func drawDelay(rnd *rand.Rand, d Delay) time.Duration {
	hi := max(d.Min, d.Max)
	if hi <= 0 {
		return 0
	}
	return d.Min + time.Duration(rnd.Int64N(int64(hi-d.Min)+1))
}

// copyFlushing copies a stream the proxy cannot split, flushing as it goes.
func copyFlushing(w http.ResponseWriter, flusher http.Flusher, body io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}
