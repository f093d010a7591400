//go:build e2e

package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// The floor: what any cache of the ConfigMaps must at least do to hold them,
// measured on the same server as the informers. A floor list is one list of the
// namespace, by paginated LIST requests or by a streaming list, whose protobuf
// is decoded object by object into *corev1.ConfigMap values (each its own
// allocation, managedFields dropped, as the informers' transform does) kept in a
// slice: no cache, no queue, no handler, no second goroutine. The responses are
// read with the clientset's REST client; the frames and envelopes around the
// objects are walked in place (floorFields), so that the only decoding is each
// object's own Unmarshal.

// floorPageSize is the page size of the paginated floor: the reflector's
// default, which ctrlkit's informer uses (client-go's reflector pages by 500 too).
const floorPageSize = 500

const floorAccept = "application/vnd.kubernetes.protobuf"

// floorResult is one floor list: the objects and how they came.
type floorResult struct {
	objs []*corev1.ConfigMap
	// requests is the number of LIST pages, or 1 for a streaming list.
	requests int
	rv       string
}

// floorList lists the ConfigMaps of ns by paginated LIST requests of
// floorPageSize, as the reflector's listing does when it lists the most recent
// version (resourceVersion ""): the first page, then the next ones by continue
// token. (At resourceVersion "0", where an informer's first LIST starts, the API
// server answers from its watch cache in one response whatever the limit.)
func floorList(ctx context.Context, c rest.Interface, ns string) (floorResult, error) {
	var r floorResult
	opts := metav1.ListOptions{Limit: floorPageSize}
	for {
		body, err := c.Get().Namespace(ns).Resource("configmaps").
			VersionedParams(&opts, scheme.ParameterCodec).
			SetHeader("Accept", floorAccept).
			Do(ctx).Raw()
		if err != nil {
			return r, err
		}
		r.requests++
		list, err := floorUnwrap(body)
		if err != nil {
			return r, fmt.Errorf("floor: page %d: %w", r.requests, err)
		}
		var lm metav1.ListMeta
		err = floorFields(list, func(num uint64, data []byte) error {
			switch num {
			case 1:
				return lm.Unmarshal(data)
			case 2:
				obj, err := floorDecode(data)
				if err != nil {
					return err
				}
				r.objs = append(r.objs, obj)
			}
			return nil
		})
		if err != nil {
			return r, fmt.Errorf("floor: page %d: %w", r.requests, err)
		}
		if r.rv == "" {
			r.rv = lm.ResourceVersion
		}
		if lm.Continue == "" {
			return r, nil
		}
		opts.Continue, opts.ResourceVersion = lm.Continue, ""
	}
}

// floorStream lists the ConfigMaps of ns by a streaming list, as the reflector
// does where the server offers it: a watch with sendInitialEvents from the most
// recent resourceVersion, read until the bookmark that ends the initial events.
func floorStream(ctx context.Context, c rest.Interface, ns string) (floorResult, error) {
	r := floorResult{requests: 1}
	yes := true
	opts := metav1.ListOptions{
		Watch:                true,
		SendInitialEvents:    &yes,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		AllowWatchBookmarks:  true,
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	body, err := c.Get().Namespace(ns).Resource("configmaps").
		VersionedParams(&opts, scheme.ParameterCodec).
		SetHeader("Accept", floorAccept).
		Throttle(nil).
		Stream(ctx)
	if err != nil {
		return r, err
	}
	defer body.Close()
	br := bufio.NewReaderSize(body, 32<<10)
	var frame []byte
	for {
		var size [4]byte
		if _, err := io.ReadFull(br, size[:]); err != nil {
			return r, fmt.Errorf("floor: the stream ended after %d objects: %w", len(r.objs), err)
		}
		n := binary.BigEndian.Uint32(size[:])
		if n > 64<<20 {
			return r, fmt.Errorf("floor: a frame of %d bytes", n)
		}
		if cap(frame) < int(n) {
			frame = make([]byte, n)
		}
		frame = frame[:n]
		if _, err := io.ReadFull(br, frame); err != nil {
			return r, fmt.Errorf("floor: the stream ended in a frame: %w", err)
		}
		// A metav1.WatchEvent: type (1), object (2) a RawExtension whose raw (1)
		// is a protobuf body.
		var typ, raw []byte
		err := floorFields(frame, func(num uint64, data []byte) error {
			switch num {
			case 1:
				typ = data
			case 2:
				return floorFields(data, func(num uint64, data []byte) error {
					if num == 1 {
						raw = data
					}
					return nil
				})
			}
			return nil
		})
		if err != nil {
			return r, fmt.Errorf("floor: event %d: %w", len(r.objs), err)
		}
		msg, err := floorUnwrap(raw)
		if err != nil {
			return r, fmt.Errorf("floor: %s event: %w", typ, err)
		}
		obj, err := floorDecode(msg)
		if err != nil {
			return r, fmt.Errorf("floor: %s event: %w", typ, err)
		}
		switch string(typ) {
		case "ADDED":
			r.objs = append(r.objs, obj)
		case "BOOKMARK":
			if obj.Annotations[metav1.InitialEventsAnnotationKey] == "true" {
				r.rv = obj.ResourceVersion
				return r, nil
			}
		default:
			return r, fmt.Errorf("floor: a %s event during the initial events", typ)
		}
	}
}

// floorDecode decodes one ConfigMap message into its own allocation and drops its
// managedFields.
func floorDecode(msg []byte) (*corev1.ConfigMap, error) {
	obj := new(corev1.ConfigMap)
	if err := obj.Unmarshal(msg); err != nil {
		return nil, err
	}
	obj.ManagedFields = nil
	return obj, nil
}

// floorUnwrap returns the object message of a protobuf body: the bytes after
// "k8s\x00" are a runtime.Unknown whose raw (2) is the message.
func floorUnwrap(body []byte) ([]byte, error) {
	rest, ok := bytes.CutPrefix(body, []byte("k8s\x00"))
	if !ok {
		return nil, errors.New("not a protobuf body")
	}
	var msg []byte
	err := floorFields(rest, func(num uint64, data []byte) error {
		if num == 2 {
			msg = data
		}
		return nil
	})
	return msg, err
}

// floorFields calls fn with the number and bytes of every length-delimited field
// of the protobuf message b, in order, and skips the others.
func floorFields(b []byte, fn func(num uint64, data []byte) error) error {
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 {
			return errors.New("bad field tag")
		}
		b = b[n:]
		switch tag & 7 {
		case 0:
			if _, n = binary.Uvarint(b); n <= 0 {
				return errors.New("bad varint")
			}
			b = b[n:]
		case 1, 5:
			w := 8
			if tag&7 == 5 {
				w = 4
			}
			if len(b) < w {
				return errors.New("truncated fixed field")
			}
			b = b[w:]
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return errors.New("bad length")
			}
			if err := fn(tag>>3, b[n:n+int(l)]); err != nil {
				return err
			}
			b = b[n+int(l):]
		default:
			return fmt.Errorf("wire type %d", tag&7)
		}
	}
	return nil
}
