package manager

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// selfSignedValidity is how long the certificate serverTLS generates is valid.
const selfSignedValidity = 365 * 24 * time.Hour

// certRecheck is how often the certificate files are looked at again.
const certRecheck = 10 * time.Second

// serverTLS is the TLS configuration of the metrics and pprof servers: the
// certificate of certFile and keyFile, read again when they change (see
// certFiles), or, when both are empty, a self-signed one made at now.
func serverTLS(certFile, keyFile string, now time.Time, log logr.Logger) (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// HTTP/1.1 only: the servers' timeouts and limits are those of
		// net/http's HTTP/1 server.
		NextProtos: []string{"http/1.1"},
	}
	if certFile == "" {
		cert, err := selfSigned(now)
		if err != nil {
			return nil, fmt.Errorf("manager: serving certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
		return cfg, nil
	}
	files := &certFiles{certFile: certFile, keyFile: keyFile, log: log}
	if err := files.load(now); err != nil {
		return nil, err
	}
	cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		return files.current(time.Now()), nil
	}
	return cfg, nil
}

// certFiles is a certificate read from files, and read again on a handshake
// at least certRecheck after the last look if either file's modification time
// or size has changed (a Secret's volume is updated that way when the
// certificate is rotated). A pair that cannot be read, or does not match,
// leaves the previous certificate in use, and is logged. Its methods are safe
// for concurrent use.
type certFiles struct {
	certFile, keyFile string
	log               logr.Logger

	mu      sync.Mutex
	cert    *tls.Certificate // never nil after the first load
	stamp   string           // modification times and sizes of the files loaded
	checked time.Time        // last look at the files
}

// load reads the files if they changed since the last load.
func (f *certFiles) load(now time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checked = now
	var stamp strings.Builder
	for _, name := range []string{f.certFile, f.keyFile} {
		fi, err := os.Stat(name)
		if err != nil {
			return fmt.Errorf("manager: serving certificate: %w", err)
		}
		fmt.Fprintf(&stamp, "%d/%d;", fi.ModTime().UnixNano(), fi.Size())
	}
	if f.cert != nil && stamp.String() == f.stamp {
		return nil
	}
	cert, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
	if err != nil {
		return fmt.Errorf("manager: serving certificate: %w", err)
	}
	f.cert, f.stamp = &cert, stamp.String()
	return nil
}

// current returns the certificate to present at now, reading the files again
// if it is time to look.
func (f *certFiles) current(now time.Time) *tls.Certificate {
	f.mu.Lock()
	due := now.Sub(f.checked) >= certRecheck
	f.mu.Unlock()
	if due {
		if err := f.load(now); err != nil {
			f.log.Error(err, "keeping the previous serving certificate")
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cert
}

// selfSigned makes a certificate valid from now (less a minute, for clocks a
// little behind) for selfSignedValidity, for localhost, the loopback addresses
// and the host's name, signed by its own fresh ECDSA P-256 key.
func selfSigned(now time.Time) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, err
	}
	names := []string{"localhost"}
	if host, err := os.Hostname(); err == nil && host != "" && host != "localhost" {
		names = append(names, host)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "ctrlkit-manager"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(selfSignedValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              names,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}
