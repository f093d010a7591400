package reflector

import (
	"bytes"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// The reader of JSON lists that jsonListFrom replaced, which read the whole
// answer first: the reference FuzzJSONListStream checks the stream reader
// against.

// jsonList decodes a JSON list, each item into its own allocation, except
// those lookup knows (see protoList).
func (l *restLW[T, E]) jsonList(body []byte, lookup lookupFunc[T]) ([]T, []bool, []*RefusedError, metav1.ListMeta, error) {
	kind, meta, raws, ok := jsonListParts(body)
	var lm metav1.ListMeta
	if ok && meta != nil {
		if err := utiljson.Unmarshal(meta, &lm); err != nil {
			return nil, nil, nil, metav1.ListMeta{}, fmt.Errorf("reflector: list of %s: %w", l.resource, err)
		}
	}
	if !ok {
		var list struct {
			Kind     string            `json:"kind"`
			Metadata metav1.ListMeta   `json:"metadata"`
			Items    []json.RawMessage `json:"items"`
		}
		if err := utiljson.Unmarshal(body, &list); err != nil {
			return nil, nil, nil, metav1.ListMeta{}, fmt.Errorf("reflector: list of %s: %w", l.resource, err)
		}
		kind, lm = []byte(list.Kind), list.Metadata
		raws = make([][]byte, len(list.Items))
		for i, raw := range list.Items {
			raws[i] = raw
		}
	}
	if string(kind) != l.kind+"List" {
		return nil, nil, nil, metav1.ListMeta{}, fmt.Errorf("reflector: list of %s: %w", l.resource, l.wrongKind("the server sent", kind, l.kind+"List"))
	}
	items := make([]T, 0, len(raws))
	var fromStore []bool
	if lookup != nil {
		fromStore = make([]bool, 0, len(raws))
	}
	var refused []*RefusedError
	keys := keyReader[T]{lookup: lookup}
	var buf []byte
	for i, raw := range raws {
		if obj, ok := keys.findJSON(raw, l.kind); ok {
			items, fromStore = append(items, obj), append(fromStore, true)
			continue
		}
		obj, err := l.decodeJSON(raw, &buf)
		if err != nil {
			ref := jsonRefusal(raw, err)
			if ref == nil {
				return nil, nil, nil, metav1.ListMeta{}, fmt.Errorf("reflector: list of %s: item %d: %w", l.resource, i, err)
			}
			refused = append(refused, ref)
			continue
		}
		items = append(items, obj)
		if fromStore != nil {
			fromStore = append(fromStore, false)
		}
	}
	return items, fromStore, refused, lm, nil
}

// jsonListParts splits the JSON of a list into its kind (a string's bytes),
// its metadata and its items, without decoding or copying them: the items are
// then decoded one by one, and read once less than when the whole list is
// decoded into raw messages first (which checks every byte, then copies every
// item). ok is false when the JSON is not such a list where it is read, or
// repeats one of those members, or escapes a key or the kind: the caller then
// decodes it whole, which reports what is wrong.
func jsonListParts(body []byte) (kind, meta []byte, items [][]byte, ok bool) {
	i := jsonSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil, nil, nil, false
	}
	var seenKind, seenItems bool
	if i = jsonSpace(body, i+1); i < len(body) && body[i] == '}' {
		return nil, nil, nil, jsonSpace(body, i+1) == len(body) // {}
	}
	for {
		if i >= len(body) || body[i] != '"' {
			return nil, nil, nil, false
		}
		ke := jsonString(body, i)
		if ke < 0 || bytes.IndexByte(body[i:ke], '\\') >= 0 {
			return nil, nil, nil, false
		}
		key := body[i+1 : ke-1]
		c := jsonSpace(body, ke)
		if c >= len(body) || body[c] != ':' {
			return nil, nil, nil, false
		}
		vs := jsonSpace(body, c+1)
		var ve int
		switch string(key) {
		case "items":
			if seenItems {
				return nil, nil, nil, false
			}
			seenItems = true
			if items, ve = jsonArray(body, vs); ve < 0 {
				return nil, nil, nil, false
			}
		default:
			if ve = jsonValue(body, vs); ve < 0 {
				return nil, nil, nil, false
			}
			switch string(key) {
			case "kind":
				if seenKind || body[vs] != '"' || bytes.IndexByte(body[vs:ve], '\\') >= 0 {
					return nil, nil, nil, false
				}
				seenKind, kind = true, body[vs+1:ve-1]
			case "metadata":
				if meta != nil {
					return nil, nil, nil, false
				}
				meta = body[vs:ve]
			}
		}
		if i = jsonSpace(body, ve); i < len(body) && body[i] == ',' {
			i = jsonSpace(body, i+1)
			continue
		}
		break
	}
	if i >= len(body) || body[i] != '}' || jsonSpace(body, i+1) != len(body) {
		return nil, nil, nil, false
	}
	return kind, meta, items, true
}

// jsonArray returns the elements of the array (or null) that starts at b[i],
// and the index just past it, or -1 if it is not well formed where read.
func jsonArray(b []byte, i int) (elems [][]byte, end int) {
	if bytes.HasPrefix(b[i:], []byte("null")) {
		return nil, i + 4
	}
	if i >= len(b) || b[i] != '[' {
		return nil, -1
	}
	if i = jsonSpace(b, i+1); i < len(b) && b[i] == ']' {
		return [][]byte{}, i + 1
	}
	for {
		e := jsonValue(b, i)
		if e < 0 {
			return nil, -1
		}
		elems = append(elems, b[i:e])
		switch i = jsonSpace(b, e); {
		case i < len(b) && b[i] == ',':
			i = jsonSpace(b, i+1)
		case i < len(b) && b[i] == ']':
			return elems, i + 1
		default:
			return nil, -1
		}
	}
}
