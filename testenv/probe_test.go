package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// The readiness probe sends the admin token only to the server whose certificate
// kube-apiserver wrote to the cert folder: a server on the port with another certificate
// (for 127.0.0.1, self-signed, as kube-apiserver's own) gets a failed handshake and no token.
func TestReadyProbeVerifiesTheServer(t *testing.T) {
	const token = "admin-token"
	var requests, withToken atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if r.Header.Get("Authorization") == "Bearer "+token {
			withToken.Add(1)
		}
		io.WriteString(w, "ok")
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.StartTLS()
	defer srv.Close()

	certFile := filepath.Join(t.TempDir(), servingCertFile)
	p := &readyProbe{url: srv.URL + "/readyz", certFile: certFile, token: token}
	defer p.close()

	if p.ready(t.Context()) {
		t.Fatal("ready before the serving certificate was written")
	}
	writePEM(t, certFile, selfSignedCert(t))
	for range 2 {
		if p.ready(t.Context()) {
			t.Fatal("ready against a server whose certificate is not the one in the cert folder")
		}
	}
	if n := requests.Load(); n != 0 {
		t.Fatalf("the server with another certificate got %d requests, want none", n)
	}

	// The server's own certificate: the probe passes and sends the token.
	p.close()
	p = &readyProbe{url: srv.URL + "/readyz", certFile: certFile, token: token}
	defer p.close()
	writePEM(t, certFile, srv.Certificate().Raw)
	if !p.ready(t.Context()) {
		t.Fatal("not ready against the server whose certificate is in the cert folder")
	}
	if withToken.Load() != 1 {
		t.Fatalf("%d requests carried the token, want 1", withToken.Load())
	}
}

// selfSignedCert returns the DER of a self-signed CA certificate for 127.0.0.1.
func selfSignedCert(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "impostor"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:              []string{"localhost"},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func writePEM(t *testing.T, path string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
