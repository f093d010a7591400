package reflector

import "bytes"

// ObjectKey names one version of an object: what ReadObjectKey reads.
type ObjectKey struct {
	Kind            string // "Pod"; "Status" for an API status rather than an object
	Namespace       string
	Name            string
	ResourceVersion string
}

// ReadObjectKey reads the kind, namespace, name and resourceVersion of the one
// object in a kube-apiserver response body (the answer to a create, update,
// patch or delete), JSON or protobuf (with its "k8s\x00" envelope), without
// decoding the rest. ok is false when the body is neither, or holds no
// metadata. It never panics, whatever the body.
func ReadObjectKey(body []byte) (k ObjectKey, ok bool) {
	if bytes.HasPrefix(body, protoMagic) {
		e, err := readEnvelope(body)
		if err != nil {
			return k, false
		}
		w, ok, err := readKey(e.raw)
		if err != nil || !ok {
			return k, false
		}
		return ObjectKey{Kind: string(e.kind), Namespace: string(w.namespace), Name: string(w.name), ResourceVersion: string(w.resourceVersion)}, true
	}
	j, ok := readJSONKey(body)
	if !ok {
		return k, false
	}
	return ObjectKey{Kind: j.Kind, Namespace: j.Metadata.Namespace, Name: j.Metadata.Name, ResourceVersion: j.Metadata.ResourceVersion}, true
}
