package manager

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeKubeconfig(t *testing.T, dir, server string) string {
	t.Helper()
	p := filepath.Join(dir, "config-"+strings.NewReplacer(":", "", "/", "").Replace(server))
	body := `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "` + server + `"}
users:
- name: u
  user: {token: t}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLoadRESTConfigOrder: the path given wins over $KUBECONFIG, which wins over
// ~/.kube/config; with none of them and no in-cluster service account the
// error says what was tried.
func TestLoadRESTConfigOrder(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(filepath.Join(home, ".kube"), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", home)
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")

	if _, err := LoadRESTConfig(""); err == nil || !strings.Contains(err.Error(), "$KUBECONFIG") {
		t.Fatalf("nothing to load: %v, want an error naming the places tried", err)
	}
	homeCfg := writeKubeconfig(t, dir, "https://home:1")
	if err := os.Rename(homeCfg, filepath.Join(home, ".kube", "config")); err != nil {
		t.Fatal(err)
	}
	check := func(path, want string) {
		t.Helper()
		cfg, err := LoadRESTConfig(path)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Host != want {
			t.Errorf("LoadRESTConfig(%q) with KUBECONFIG=%q: host %q, want %q", path, os.Getenv("KUBECONFIG"), cfg.Host, want)
		}
	}
	check("", "https://home:1")
	t.Setenv("KUBECONFIG", writeKubeconfig(t, dir, "https://env:1"))
	check("", "https://env:1")
	check(writeKubeconfig(t, dir, "https://flag:1"), "https://flag:1")
	if _, err := LoadRESTConfig(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing explicit kubeconfig loaded")
	}
}
