package injector

import (
	"errors"
	"strings"
	"testing"
)

func TestParseSidecarRejectsBadDefinitions(t *testing.T) {
	for _, tc := range []struct {
		name, data, want string
	}{
		{"empty", "  \n", "empty definition"},
		{"not yaml", "containers: [", "yaml"},
		{"not a map", "- a\n- b\n", "cannot unmarshal"},
		{"unknown field", "contaners:\n  - name: envoy\n    image: e\n", "unknown field"},
		{"unknown container field", "containers:\n  - name: envoy\n    imag: e\n", "unknown field"},
		{"no containers", "volumes:\n  - name: v\n", "no containers"},
		{"unnamed container", "containers:\n  - image: e\n", "containers[0] has no name"},
		{"no image", "containers:\n  - name: envoy\n", `container "envoy" has no image`},
		{"repeated container", "containers:\n  - {name: a, image: e}\n  - {name: a, image: f}\n", `container name "a" repeated`},
		{"unnamed volume", "containers:\n  - {name: a, image: e}\nvolumes:\n  - emptyDir: {}\n", "volumes[0] has no name"},
		{"repeated volume", "containers:\n  - {name: a, image: e}\nvolumes:\n  - {name: v}\n  - {name: v}\n", `volume name "v" repeated`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, err := ParseSidecar("ConfigMap ns/cm", []byte(tc.data))
			if sc != nil {
				t.Errorf("got a sidecar %+v", sc)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v, want a *ConfigError", err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "injector: invalid sidecar definition in ConfigMap ns/cm: ") || !strings.Contains(msg, tc.want) {
				t.Errorf("error %q, want the source and %q", msg, tc.want)
			}
			if errors.Unwrap(err) == nil {
				t.Errorf("error %q wraps nothing", msg)
			}
		})
	}
}

func TestParseSidecarHash(t *testing.T) {
	base := mustParse(t, envoyV1)
	if len(base.Hash()) != 16 {
		t.Errorf("hash %q, want 16 hex digits", base.Hash())
	}
	if (&Sidecar{}).Hash() != "" {
		t.Error("a Sidecar not from ParseSidecar has a hash")
	}
	for _, change := range [][2]string{
		{"envoy:v1", "envoy:v1.1"},
		{"/etc/envoy/envoy.json", "/etc/envoy/other.json"},
		{"name: envoy\n", "name: envoy2\n"},
		{"mountPath: /etc/envoy", "mountPath: /etc/envoy2"},
	} {
		changed := strings.Replace(envoyV1, change[0], change[1], 1)
		if changed == envoyV1 {
			t.Fatalf("change %q does not apply", change)
		}
		if h := mustParse(t, changed).Hash(); h == base.Hash() {
			t.Errorf("changing %q to %q keeps the hash", change[0], change[1])
		}
	}
	// Key order and formatting do not count.
	reordered := `
volumes: [{configMap: {name: envoy}, name: envoy-conf}]
containers:
  - volumeMounts: [{mountPath: /etc/envoy, name: envoy-conf}]
    args: [--config-path, /etc/envoy/envoy.json]
    image: envoyproxy/envoy:v1
    name: envoy
`
	if h := mustParse(t, reordered).Hash(); h != base.Hash() {
		t.Errorf("reordered definition hash %s, want %s", h, base.Hash())
	}
}
