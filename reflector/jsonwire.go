package reflector

// This file finds an object's metadata.managedFields in its JSON, so that a
// reflector whose Transform is StripManagedFields does not decode them (see
// restLW.withoutManagedFields). It only ever cuts out one member of the
// metadata object; when the JSON is not what it expects it leaves it as it
// is, for the decoder to read (and the Transform to strip).

// jsonWithoutManagedFields returns obj, an object's JSON, without the
// managedFields member of its top-level metadata: obj itself when it has
// none or is not well formed where it is read, else a copy built in *buf,
// which it reuses (the decoder copies what it keeps).
func jsonWithoutManagedFields(obj []byte, buf *[]byte) []byte {
	i := jsonSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return obj
	}
	for i = jsonSpace(obj, i+1); i < len(obj) && obj[i] == '"'; {
		key, vs, ve := jsonMember(obj, i)
		if ve < 0 {
			return obj
		}
		if string(key) == "metadata" && obj[vs] == '{' {
			from, to := jsonManagedFields(obj, vs)
			if from < 0 {
				return obj
			}
			out := append(append((*buf)[:0], obj[:from]...), obj[to:]...)
			*buf = out
			return out
		}
		if i = jsonSpace(obj, ve); i >= len(obj) || obj[i] != ',' {
			return obj
		}
		i = jsonSpace(obj, i+1)
	}
	return obj
}

// jsonManagedFields returns the span to cut out of obj to drop the
// managedFields member of the object that starts at obj[o] ('{'), with the
// comma that separates it from its neighbour, or -1, -1 if there is none.
func jsonManagedFields(obj []byte, o int) (from, to int) {
	prevEnd := -1 // just past the previous member's value
	for i := jsonSpace(obj, o+1); i < len(obj) && obj[i] == '"'; {
		key, _, ve := jsonMember(obj, i)
		if ve < 0 {
			return -1, -1
		}
		next := jsonSpace(obj, ve)
		if next >= len(obj) || (obj[next] != ',' && obj[next] != '}') {
			return -1, -1
		}
		if string(key) == "managedFields" {
			switch {
			case prevEnd >= 0:
				return prevEnd, ve // `, "managedFields": …`
			case obj[next] == ',':
				return i, jsonSpace(obj, next+1) // `"managedFields": …, `
			default:
				return i, ve // the only member
			}
		}
		if obj[next] == '}' {
			return -1, -1
		}
		prevEnd, i = ve, jsonSpace(obj, next+1)
	}
	return -1, -1
}

// jsonMember reads the object member whose key starts at obj[i] ('"') and
// returns the key's raw bytes and where its value starts and ends; ve is -1
// if the member is not well formed.
func jsonMember(obj []byte, i int) (key []byte, vs, ve int) {
	ke := jsonString(obj, i)
	if ke < 0 {
		return nil, 0, -1
	}
	c := jsonSpace(obj, ke)
	if c >= len(obj) || obj[c] != ':' {
		return nil, 0, -1
	}
	vs = jsonSpace(obj, c+1)
	return obj[i+1 : ke-1], vs, jsonValue(obj, vs)
}

func jsonSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// jsonString returns the index just past the string that starts at b[i]
// ('"'), or -1 if it does not end.
func jsonString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// jsonValue returns the index just past the value that starts at b[i], or
// -1 if it does not end or its brackets do not match (up to 64 deep).
func jsonValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return jsonString(b, i)
	case '{', '[':
		var open [64]byte
		depth := 0
		for j := i; j < len(b); j++ {
			switch c := b[j]; c {
			case '"':
				e := jsonString(b, j)
				if e < 0 {
					return -1
				}
				j = e - 1
			case '{', '[':
				if depth == len(open) {
					return -1
				}
				open[depth] = c
				depth++
			case '}', ']':
				if depth == 0 || open[depth-1] != c-2 { // '{'+2 == '}', '['+2 == ']'
					return -1
				}
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	default: // a number, true, false or null
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
}
