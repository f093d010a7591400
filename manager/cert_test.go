package manager

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// writePair writes a fresh self-signed certificate and its key as PEM files
// in dir, and returns the certificate's serial number.
func writePair(t *testing.T, dir string, now time.Time) string {
	t.Helper()
	cert, err := selfSigned(now)
	if err != nil {
		t.Fatal(err)
	}
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert.Leaf.SerialNumber.String()
}

// TestCertFiles: the certificate of CertFile and KeyFile is served, read again
// once certRecheck has passed after a rotation, and kept when the new files
// cannot be read; a pair that cannot be read at start is an error.
func TestCertFiles(t *testing.T) {
	dir := t.TempDir()
	crt, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if _, err := serverTLS(crt, key, time.Now(), logr.Discard()); err == nil {
		t.Fatal("serverTLS without the files: no error")
	}
	start := time.Now()
	first := writePair(t, dir, start)
	cfg, err := serverTLS(crt, key, start, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	// The reloader behind GetCertificate, driven at chosen times.
	f := &certFiles{certFile: crt, keyFile: key, log: logr.Discard()}
	if err := f.load(start); err != nil {
		t.Fatal(err)
	}
	at := func(d time.Duration) string {
		c := f.current(start.Add(d))
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.SerialNumber.String()
	}
	if got, _ := cfg.GetCertificate(nil); got == nil {
		t.Fatal("GetCertificate: nil")
	}
	if got := at(0); got != first {
		t.Fatalf("serial %s, want the first certificate's %s", got, first)
	}
	// Rotation; a later modification time, whatever the file system's clock
	// granularity.
	second := writePair(t, dir, start)
	later := time.Now().Add(time.Minute)
	os.Chtimes(crt, later, later)
	os.Chtimes(key, later, later)
	if got := at(certRecheck / 2); got != first {
		t.Errorf("before certRecheck: serial %s, want the first certificate's %s", got, first)
	}
	if got := at(certRecheck + certRecheck/2); got != second {
		t.Errorf("after certRecheck: serial %s, want the rotated certificate's %s", got, second)
	}
	// A broken rotation keeps the certificate in use.
	if err := os.WriteFile(crt, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := at(3 * certRecheck); got != second {
		t.Errorf("after a broken rotation: serial %s, want the previous certificate's %s", got, second)
	}
}
