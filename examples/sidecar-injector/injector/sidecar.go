package injector

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// ConfigKey is the data key of the sidecar ConfigMap that holds the sidecar definition.
const ConfigKey = "sidecar.yaml"

// Sidecar is what the controller injects into the pod template of every opted-in
// Deployment: the YAML under ConfigKey in the sidecar ConfigMap, for example
//
//	containers:
//	  - name: envoy
//	    image: envoyproxy/envoy:v1.31.0
//	    volumeMounts:
//	      - name: envoy-conf
//	        mountPath: /etc/envoy
//	volumes:
//	  - name: envoy-conf
//	    configMap:
//	      name: envoy
//
// A Sidecar from ParseSidecar has at least one container, and its container names and
// volume names are non-empty and unique. Treat it as read-only: the controller shares
// one parsed Sidecar between all its reconciles.
type Sidecar struct {
	Containers []corev1.Container `json:"containers"`
	Volumes    []corev1.Volume    `json:"volumes,omitempty"`

	// hash identifies the definition (see Hash); set by ParseSidecar.
	hash string
}

// ConfigError reports a sidecar definition that cannot be used: YAML that does not
// parse, an unknown field, no container, or a missing or repeated name.
type ConfigError struct {
	// Source names where the definition came from, such as "ConfigMap ns/name".
	Source string
	// Err is the underlying problem.
	Err error
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("injector: invalid sidecar definition in %s: %v", e.Source, e.Err)
}

func (e *ConfigError) Unwrap() error { return e.Err }

// ParseSidecar parses and validates a sidecar definition. Unknown fields are errors
// (a misspelt "contaners" must not silently inject nothing). source is used in
// errors only. Every error is a *ConfigError.
func ParseSidecar(source string, data []byte) (*Sidecar, error) {
	fail := func(err error) (*Sidecar, error) { return nil, &ConfigError{Source: source, Err: err} }
	if len(strings.TrimSpace(string(data))) == 0 {
		return fail(errors.New("empty definition"))
	}
	var sc Sidecar
	if err := yaml.UnmarshalStrict(data, &sc); err != nil {
		return fail(err)
	}
	if len(sc.Containers) == 0 {
		return fail(errors.New("no containers"))
	}
	seen := map[string]bool{}
	for i, c := range sc.Containers {
		switch {
		case c.Name == "":
			return fail(fmt.Errorf("containers[%d] has no name", i))
		case c.Image == "":
			return fail(fmt.Errorf("container %q has no image", c.Name))
		case seen[c.Name]:
			return fail(fmt.Errorf("container name %q repeated", c.Name))
		}
		seen[c.Name] = true
	}
	clear(seen)
	for i, v := range sc.Volumes {
		switch {
		case v.Name == "":
			return fail(fmt.Errorf("volumes[%d] has no name", i))
		case seen[v.Name]:
			return fail(fmt.Errorf("volume name %q repeated", v.Name))
		}
		seen[v.Name] = true
	}
	// The hash covers the parsed definition, so that reformatting the YAML (comments,
	// indentation, key order) does not re-patch every Deployment.
	canonical, err := json.Marshal(&sc)
	if err != nil {
		return fail(err)
	}
	sum := sha256.Sum256(canonical)
	sc.hash = hex.EncodeToString(sum[:8])
	return &sc, nil
}

// Hash identifies the definition: two Sidecars parsed from YAML meaning the same have
// the same Hash, and a change of any field changes it. It is "" for a Sidecar not
// made by ParseSidecar.
func (s *Sidecar) Hash() string { return s.hash }

// containerNames returns the names of the sidecar's containers, in order.
func (s *Sidecar) containerNames() []string {
	names := make([]string, len(s.Containers))
	for i, c := range s.Containers {
		names[i] = c.Name
	}
	return names
}

// volumeNames returns the names of the sidecar's volumes, in order.
func (s *Sidecar) volumeNames() []string {
	names := make([]string, len(s.Volumes))
	for i, v := range s.Volumes {
		names[i] = v.Name
	}
	return names
}
