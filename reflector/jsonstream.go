package reflector

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// errJSONTruncated is a JSON answer that ended inside a value (in the words
// of encoding/json).
var errJSONTruncated = errors.New("unexpected end of JSON input")

// jsonStream reads a JSON document one value at a time as it arrives, so that
// a list's items are never all in memory as bytes: each is read into a buffer
// that the next one reuses.
//
// It only finds where values end (strings, and brackets by depth); whether a
// value is well formed is left to the decoder each value is given to, or to
// json.Valid for those that are skipped, so that every malformed answer is
// refused, as decoding it whole would.
type jsonStream struct {
	r *bufio.Reader
}

// peek skips white space and returns the next byte without consuming it.
func (s jsonStream) peek() (byte, error) {
	for {
		b, err := s.r.Peek(1)
		if err != nil {
			if err == io.EOF {
				err = errJSONTruncated
			}
			return 0, err
		}
		switch b[0] {
		case ' ', '\t', '\r', '\n':
			_, _ = s.r.Discard(1)
		default:
			return b[0], nil
		}
	}
}

// expect skips white space and consumes the byte c, or fails naming what it
// expected.
func (s jsonStream) expect(c byte, what string) error {
	got, err := s.peek()
	if err != nil {
		return err
	}
	if got != c {
		return fmt.Errorf("invalid JSON: found %q where %s was expected", got, what)
	}
	_, _ = s.r.Discard(1)
	return nil
}

// atEnd reports whether only white space is left.
func (s jsonStream) atEnd() (bool, error) {
	_, err := s.peek()
	if err == errJSONTruncated {
		return true, nil
	}
	return false, err
}

// value skips white space and appends the next value's bytes to dst.
func (s jsonStream) value(dst []byte) ([]byte, error) {
	c, err := s.peek()
	if err != nil {
		return dst, err
	}
	var sc jsonScan
	if c != '"' && c != '{' && c != '[' {
		sc.scalar = true
	}
	for {
		buf, err := s.r.Peek(max(s.r.Buffered(), 1))
		if len(buf) == 0 {
			if err == io.EOF {
				if sc.scalar && len(dst) > 0 {
					return dst, nil // a scalar that ends the document
				}
				err = errJSONTruncated
			}
			return dst, err
		}
		n, done := sc.feed(buf)
		dst = append(dst, buf[:n]...)
		_, _ = s.r.Discard(n)
		if done {
			return dst, nil
		}
	}
}

// jsonScan finds the end of one JSON value fed to it in pieces.
type jsonScan struct {
	depth  int
	str    bool // inside a string
	esc    bool // inside a string, after a backslash that escapes the next byte
	scalar bool // the value is a number, true, false or null
}

// feed scans b, the next bytes of the value, and returns how many of them
// belong to it and whether it ends there.
func (sc *jsonScan) feed(b []byte) (n int, done bool) {
	if sc.scalar {
		for i, c := range b {
			switch c {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return i, true
			}
		}
		return len(b), false
	}
	i := 0
	for i < len(b) {
		if sc.str {
			if sc.esc {
				sc.esc = false
				i++
				continue
			}
			// Nothing before i escapes what follows: only the backslashes
			// between i and the next quote (or the end) count.
			q := bytes.IndexByte(b[i:], '"')
			if q < 0 {
				sc.esc = backslashes(b[i:])%2 == 1
				return len(b), false
			}
			q += i
			escaped := backslashes(b[i:q])%2 == 1
			if i = q + 1; escaped {
				continue
			}
			sc.str = false
			if sc.depth == 0 {
				return i, true // the value was a string
			}
			continue
		}
		switch b[i] {
		case '"':
			sc.str = true
		case '{', '[':
			sc.depth++
		case '}', ']':
			if sc.depth--; sc.depth <= 0 {
				return i + 1, true
			}
		}
		i++
	}
	return len(b), false
}

// backslashes counts the backslashes that end b.
// plainJSONString reports whether the quoted JSON string raw means its bytes
// between the quotes: it has no escape and no control character (which JSON
// forbids in a string, and the decoder refuses).
func plainJSONString(raw []byte) bool {
	for _, c := range raw {
		if c == '\\' || c < 0x20 {
			return false
		}
	}
	return true
}

func backslashes(b []byte) int {
	n := 0
	for n < len(b) && b[len(b)-1-n] == '\\' {
		n++
	}
	return n
}

// jsonListFrom reads a list's JSON answer from br as it arrives: the items,
// decoded one at a time (or found in the store by lookup), whether each came
// from the store, the refused items, and the list's metadata. Its members are
// read with the rules of decoding the list whole (utiljson: names match
// case-sensitively; of repeated members the last items and kind win, and
// repeated metadata objects merge), and an answer that is not well-formed
// JSON anywhere is refused, so that it accepts what decoding the whole list
// accepts. FuzzJSONListStream checks it against the whole-answer reader it
// replaced.
func (l *restLW[T, E]) jsonListFrom(br *bufio.Reader, lookup lookupFunc[T]) ([]T, []bool, []*RefusedError, metav1.ListMeta, error) {
	fail := func(err error) ([]T, []bool, []*RefusedError, metav1.ListMeta, error) {
		return nil, nil, nil, metav1.ListMeta{}, fmt.Errorf("reflector: list of %s: %w", l.resource, err)
	}
	s := jsonStream{r: br}
	var (
		lm        metav1.ListMeta
		kind      string
		items     []T
		fromStore []bool
		refused   []*RefusedError
		raw, buf  []byte
		// itemErr is the error of the first item (of the items member read
		// last) that could not be decoded nor refused: the list's error,
		// unless a later items member replaces that one.
		itemErr error
	)
	if lookup != nil {
		fromStore = []bool{}
	}
	keys := keyReader[T]{lookup: lookup}
	if c, err := s.peek(); err != nil {
		return fail(err)
	} else if c != '{' {
		// Not an object: the decoder says what it is.
		var list struct{ Kind string }
		rest, err := io.ReadAll(br)
		if err == nil {
			err = utiljson.Unmarshal(rest, &list)
		}
		if err == nil {
			err = fmt.Errorf("invalid JSON: found %q where a list object was expected", c)
		}
		return fail(err)
	}
	_, _ = br.Discard(1)
	for first := true; ; first = false {
		c, err := s.peek()
		if err != nil {
			return fail(err)
		}
		if c == '}' && first {
			_, _ = s.r.Discard(1)
			break
		}
		if c != '"' {
			return fail(fmt.Errorf("invalid JSON: found %q where a member name was expected", c))
		}
		if raw, err = s.value(raw[:0]); err != nil {
			return fail(err)
		}
		var name string
		if plainJSONString(raw) {
			name = string(raw[1 : len(raw)-1])
		} else if err := utiljson.Unmarshal(raw, &name); err != nil {
			return fail(err)
		}
		if err := s.expect(':', "':'"); err != nil {
			return fail(err)
		}
		if name == "items" {
			// A repeated items member replaces the earlier one, as in a decode.
			items, refused, itemErr = items[:0], nil, nil
			if fromStore != nil {
				fromStore = fromStore[:0]
			}
			c, err := s.peek()
			if err != nil {
				return fail(err)
			}
			if c != '[' {
				if raw, err = s.value(raw[:0]); err != nil {
					return fail(err)
				}
				if string(raw) != "null" {
					return fail(fmt.Errorf("invalid JSON: the list's items are %.20q, not an array", raw))
				}
			} else {
				_, _ = s.r.Discard(1)
				for i := 0; ; i++ {
					c, err := s.peek()
					if err != nil {
						return fail(err)
					}
					if c == ']' && i == 0 {
						_, _ = s.r.Discard(1)
						break
					}
					if raw, err = s.value(raw[:0]); err != nil {
						return fail(err)
					}
					switch obj, found := keys.findJSON(raw, l.kind); {
					case itemErr != nil: // the list fails unless replaced: decode no more
						if !json.Valid(raw) {
							return fail(fmt.Errorf("item %d: invalid JSON", i))
						}
					case found:
						items, fromStore = append(items, obj), append(fromStore, true)
					default:
						obj, err := l.decodeJSON(raw, &buf)
						if err != nil {
							if ref := jsonRefusal(raw, err); ref != nil {
								refused = append(refused, ref)
								break
							}
							if !json.Valid(raw) { // the answer is malformed, whatever follows
								return fail(fmt.Errorf("item %d: %w", i, err))
							}
							itemErr = fmt.Errorf("item %d: %w", i, err)
						}
						items = append(items, obj)
						if fromStore != nil {
							fromStore = append(fromStore, false)
						}
					}
					if c, err = s.peek(); err != nil {
						return fail(err)
					}
					_, _ = s.r.Discard(1)
					if c == ']' {
						break
					}
					if c != ',' {
						return fail(fmt.Errorf("invalid JSON: found %q after item %d", c, i))
					}
				}
			}
		} else {
			if raw, err = s.value(raw[:0]); err != nil {
				return fail(err)
			}
			switch name {
			case "kind":
				if err := utiljson.Unmarshal(raw, &kind); err != nil {
					return fail(err)
				}
			case "metadata":
				if err := utiljson.Unmarshal(raw, &lm); err != nil {
					return fail(err)
				}
			default:
				if !json.Valid(raw) {
					return fail(fmt.Errorf("invalid JSON in the list's member %q", name))
				}
			}
		}
		c, err = s.peek()
		if err != nil {
			return fail(err)
		}
		_, _ = s.r.Discard(1)
		if c == '}' {
			break
		}
		if c != ',' {
			return fail(fmt.Errorf("invalid JSON: found %q after the list's member %q", c, name))
		}
	}
	if end, err := s.atEnd(); err != nil || !end {
		if err == nil {
			err = errors.New("invalid JSON: data after the list")
		}
		return fail(err)
	}
	if kind != l.kind+"List" {
		return fail(l.wrongKind("the server sent", []byte(kind), l.kind+"List"))
	}
	if itemErr != nil {
		return fail(itemErr)
	}
	if items == nil {
		items = []T{}
	}
	return items, fromStore, refused, lm, nil
}
