// Package cpbuild holds the two small Go modules from which testenv builds its control plane:
// one whose main package is etcd's server, one whose main package is kube-apiserver, each
// with the go.mod and go.sum that pin its versions. They are the only copy of those files in
// the repository.
//
// The files are stored as modules/<binary>/<name>.txt and embedded, so that they are part of
// the github.com/ctrlkit/ctrlkit module (a folder holding a file named go.mod would be a
// module of its own, left out of ctrlkit's module zip) and anyone who has ctrlkit can build
// the control plane.
package cpbuild

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

//go:embed modules
var modules embed.FS

// Module is one of the embedded modules: a main package that builds one binary.
type Module struct {
	// Binary is the name of the program the module builds ("etcd", "kube-apiserver").
	Binary string
	// Description names what the binary is built from, for progress messages.
	Description string
}

// Modules lists the embedded modules, the smaller build first.
var Modules = []Module{
	{Binary: "etcd", Description: "go.etcd.io/etcd/server/v3"},
	{Binary: "kube-apiserver", Description: "k8s.io/kubernetes/cmd/kube-apiserver"},
}

// File returns the content of the module's file name (go.mod, go.sum or main.go).
func (m Module) File(name string) ([]byte, error) {
	b, err := modules.ReadFile(path.Join("modules", m.Binary, name+".txt"))
	if err != nil {
		return nil, fmt.Errorf("cpbuild: %s: %w", m.Binary, err)
	}
	return b, nil
}

// Write writes the module's files, under their real names, into dir, which it creates.
func (m Module) Write(dir string) error {
	root := path.Join("modules", m.Binary)
	entries, err := fs.ReadDir(modules, root)
	if err != nil {
		return fmt.Errorf("cpbuild: %s: %w", m.Binary, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cpbuild: %w", err)
	}
	for _, e := range entries {
		b, err := modules.ReadFile(path.Join(root, e.Name()))
		if err != nil {
			return fmt.Errorf("cpbuild: %s: %w", m.Binary, err)
		}
		name := strings.TrimSuffix(e.Name(), ".txt")
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return fmt.Errorf("cpbuild: %w", err)
		}
	}
	return nil
}
