// Package testenv starts a real etcd and kube-apiserver on 127.0.0.1 for tests and demos.
//
// Guarantees:
//   - Both processes listen on free loopback ports and keep their state in a temporary
//     directory; [Env.Stop] kills them and removes the directory.
//   - Children run in their own process group with a parent-death signal, so they die with
//     the test binary even when it panics or is killed. Directories left by a killed binary
//     are removed by the next [Start] on the same machine.
//   - The API server authenticates static bearer tokens and authorizes with RBAC. The admin
//     user is in group system:masters; other users ([Config.Users]) have no rights until a
//     test grants them, which makes least-privilege tests possible.
//   - Faults can be injected on purpose: stop and restart the API server (SIGTERM or SIGKILL)
//     on the same etcd, stop and restart etcd, and compact etcd so that old resource versions
//     are answered with 410 Gone.
//
// The binaries are built from Go modules by [Build], which the command
// `go run github.com/ctrlkit/ctrlkit/testenv/cmd/controlplane` runs (from any module that
// requires ctrlkit; `make controlplane` in ctrlkit's repository). Start finds them through
// [Config.BinDir], else the environment variable [BinEnv], else [DefaultBinDir] (the user's
// cache folder), where Build puts them by default; nowhere else (not the working directory
// or its parents). Start refuses a folder or binary that is not owned by the current user or
// root, or that its group or others may write ([UntrustedBinDirError]).
//
// One Env is meant to be shared by all tests of a package, started in TestMain
// (see [RunTests]):
//
//	var env *testenv.Env
//
//	func TestMain(m *testing.M) { os.Exit(testenv.RunTests(m, testenv.Config{}, &env)) }
package testenv

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Versions of the control plane that testenv runs and [Build] builds; the go.mod files of the
// modules Build compiles pin the same versions (a unit test checks that they agree).
const (
	KubernetesVersion = "v1.36.3"
	EtcdVersion       = "v3.7.3"
)

// BinEnv names the environment variable that points at a folder holding the etcd and
// kube-apiserver binaries.
const BinEnv = "CTRLKIT_CONTROLPLANE_BIN"

// AdminUser is the name of the user in group system:masters whose config [Env.Config] returns.
const AdminUser = "admin"

// CacheKey is the name of the folder that holds the binaries of this control-plane version,
// under ctrlkit/controlplane in the user's cache folder ([DefaultBinDir]) and under
// .cache/controlplane in ctrlkit's repository (where the Makefile points [BinEnv]).
func CacheKey() string { return "kube-" + KubernetesVersion + "_etcd-" + EtcdVersion }

// User is a static bearer-token user of the API server.
type User struct {
	Name   string
	Groups []string
}

// Config configures [Start]. The zero value starts a control plane with default flags, the
// admin user only, and binaries found as described in the package documentation.
type Config struct {
	// APIServerFlags are appended to kube-apiserver's command line, so they override the
	// defaults (for example "--watch-cache-sizes=configmaps#0").
	APIServerFlags []string
	// EtcdFlags are appended to etcd's command line.
	EtcdFlags []string
	// Users are extra static-token users besides AdminUser. They have no RBAC rights
	// until a test grants them.
	Users []User
	// BinDir is the folder holding etcd and kube-apiserver. Empty means $CTRLKIT_CONTROLPLANE_BIN
	// when it is set, else [DefaultBinDir].
	BinDir string
	// StartTimeout bounds each wait for readiness when ctx has no earlier deadline.
	// Zero means 2 minutes.
	StartTimeout time.Duration
}

// Env is a running control plane. Its methods are goroutine-safe, but faults should be
// injected from one goroutine at a time.
type Env struct {
	dir       string
	tokens    map[string]string // user name → bearer token
	caData    []byte
	apiURL    string
	etcdURL   string
	timeout   time.Duration
	etcd      *process
	apiserver *process

	stopOnce sync.Once
	stopErr  error

	namespaces atomic.Int64 // namespaces made by Namespace, for unique names
}

// Start starts etcd and kube-apiserver and waits until /readyz passes. On failure it stops
// whatever it started and returns an error that includes the tail of the failing log.
func Start(ctx context.Context, cfg Config) (*Env, error) {
	binDir, err := findBinaries(cfg.BinDir)
	if err != nil {
		return nil, err
	}
	sweepStaleDirs()
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("testenv: create temp dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("testenv: write owner file: %w", err)
	}
	e := &Env{dir: dir, tokens: map[string]string{}, timeout: cfg.StartTimeout}
	if e.timeout <= 0 {
		e.timeout = 2 * time.Minute
	}
	if err := e.setUp(ctx, binDir, cfg); err != nil {
		e.Stop()
		return nil, err
	}
	return e, nil
}

func (e *Env) setUp(ctx context.Context, binDir string, cfg Config) error {
	users := append([]User{{Name: AdminUser, Groups: []string{"system:masters"}}}, cfg.Users...)
	var tokenFile strings.Builder
	for _, u := range users {
		if u.Name == "" || strings.ContainsAny(u.Name, ",\"\n") {
			return fmt.Errorf("testenv: invalid user name %q", u.Name)
		}
		if _, dup := e.tokens[u.Name]; dup {
			return fmt.Errorf("testenv: duplicate user %q", u.Name)
		}
		tok := randomHex(16)
		e.tokens[u.Name] = tok
		fmt.Fprintf(&tokenFile, "%s,%s,%s,\"%s\"\n", tok, u.Name, u.Name, strings.Join(u.Groups, ","))
	}
	tokenPath := filepath.Join(e.dir, "tokens.csv")
	if err := os.WriteFile(tokenPath, []byte(tokenFile.String()), 0o600); err != nil {
		return fmt.Errorf("testenv: write token file: %w", err)
	}
	keyPath := filepath.Join(e.dir, "sa.key")
	if err := writeRSAKey(keyPath); err != nil {
		return err
	}
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	certDir := filepath.Join(e.dir, certsDir)
	e.etcdURL = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	e.apiURL = fmt.Sprintf("https://127.0.0.1:%d", ports[2])

	e.etcd = &process{
		name:    "etcd",
		path:    filepath.Join(binDir, "etcd"),
		logPath: filepath.Join(e.dir, "etcd.log"),
		args: append([]string{
			"--name=default",
			"--data-dir=" + filepath.Join(e.dir, "etcd-data"),
			"--listen-client-urls=" + e.etcdURL,
			"--advertise-client-urls=" + e.etcdURL,
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=default=" + peerURL,
			"--unsafe-no-fsync=true",
			"--log-level=warn",
		}, cfg.EtcdFlags...),
	}
	e.apiserver = &process{
		name:    "kube-apiserver",
		path:    filepath.Join(binDir, "kube-apiserver"),
		logPath: filepath.Join(e.dir, "kube-apiserver.log"),
		args: append([]string{
			"--etcd-servers=" + e.etcdURL,
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(ports[2]),
			"--cert-dir=" + certDir,
			"--token-auth-file=" + tokenPath,
			"--authorization-mode=RBAC",
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + keyPath,
			"--service-account-signing-key-file=" + keyPath,
			"--service-cluster-ip-range=10.0.0.0/24",
			// No controller-manager runs, so nothing would create the default service
			// account that this admission plugin waits for.
			"--disable-admission-plugins=ServiceAccount",
			// Close open watches at SIGTERM instead of letting the HTTP server wait a
			// minute for them, so graceful restarts take about a second.
			"--shutdown-watch-termination-grace-period=3s",
			"--v=1",
		}, cfg.APIServerFlags...),
	}
	if err := e.StartEtcd(ctx); err != nil {
		return err
	}
	if err := e.StartAPIServer(ctx); err != nil {
		return err
	}
	ca, err := os.ReadFile(filepath.Join(certDir, servingCertFile))
	if err != nil {
		return fmt.Errorf("testenv: read serving certificate: %w", err)
	}
	e.caData = ca
	return nil
}

// Config returns a fresh admin *rest.Config. Client-side rate limits are raised (QPS 1000,
// burst 2000) because tests create many objects.
func (e *Env) Config() *rest.Config {
	cfg, _ := e.UserConfig(AdminUser)
	return cfg
}

// UserConfig returns a fresh *rest.Config that authenticates as the named user.
func (e *Env) UserConfig(name string) (*rest.Config, error) {
	tok, ok := e.tokens[name]
	if !ok {
		return nil, fmt.Errorf("testenv: unknown user %q (add it to Config.Users)", name)
	}
	return &rest.Config{
		Host:            e.apiURL,
		BearerToken:     tok,
		TLSClientConfig: rest.TLSClientConfig{CAData: append([]byte(nil), e.caData...)},
		QPS:             1000,
		Burst:           2000,
	}, nil
}

// WriteKubeconfig writes a kubeconfig file at path that connects as user (a
// Config.Users name, or AdminUser), for commands under test that take a
// -kubeconfig flag.
func (e *Env) WriteKubeconfig(path, user string) error {
	cfg, err := e.UserConfig(user)
	if err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["testenv"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: user}
	kc.CurrentContext = "testenv"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("testenv: kubeconfig of %q: %w", user, err)
	}
	return nil
}

// Dir is the temporary directory holding etcd's data, certificates and the logs.
func (e *Env) Dir() string { return e.dir }

// APIServerURL is the https URL of the API server.
func (e *Env) APIServerURL() string { return e.apiURL }

// EtcdURL is the http client URL of etcd.
func (e *Env) EtcdURL() string { return e.etcdURL }

// PIDs returns the process ids of etcd and kube-apiserver (0 for a stopped one).
func (e *Env) PIDs() (etcd, apiserver int) { return e.etcd.pid(), e.apiserver.pid() }

// StartEtcd starts etcd (on its original port and data directory) and waits until it is healthy.
func (e *Env) StartEtcd(ctx context.Context) error {
	if err := e.etcd.start(); err != nil {
		return err
	}
	ctx, cancel := e.readyContext(ctx)
	defer cancel()
	return e.etcd.waitUntil(ctx, 100*time.Millisecond, func(ctx context.Context) bool {
		body, err := httpGet(ctx, http.DefaultClient, e.etcdURL+"/health", "")
		return err == nil && strings.Contains(body, `"health":"true"`)
	})
}

// StopEtcd stops etcd with sig (SIGTERM or SIGKILL). The API server keeps running and fails
// its requests until etcd is back.
func (e *Env) StopEtcd(sig syscall.Signal) error { return e.etcd.stop(sig, 30*time.Second) }

// RestartEtcd stops etcd with sig and starts it again on the same data.
func (e *Env) RestartEtcd(ctx context.Context, sig syscall.Signal) error {
	if err := e.StopEtcd(sig); err != nil {
		return err
	}
	return e.StartEtcd(ctx)
}

// StartAPIServer starts kube-apiserver on its original port and etcd, and waits for /readyz.
func (e *Env) StartAPIServer(ctx context.Context) error {
	if err := e.apiserver.start(); err != nil {
		return err
	}
	ctx, cancel := e.readyContext(ctx)
	defer cancel()
	p := &readyProbe{url: e.apiURL + "/readyz", certFile: filepath.Join(e.dir, certsDir, servingCertFile), token: e.tokens[AdminUser]}
	defer p.close()
	return e.apiserver.waitUntil(ctx, 250*time.Millisecond, p.ready)
}

// The folder, under Env.dir, where kube-apiserver writes its self-signed serving certificate
// (--cert-dir), and the file name it gives it.
const (
	certsDir        = "certs"
	servingCertFile = "apiserver.crt"
)

// readyProbe asks the API server's /readyz with the admin token, over TLS that trusts only
// the serving certificate kube-apiserver wrote to certFile (in Env.dir, which only this user
// can write): another server on the port gets no token. Until the file is there and parses,
// the probe fails without connecting. Not goroutine-safe; close releases its connections.
type readyProbe struct {
	url      string
	certFile string
	token    string

	client *http.Client // nil until certFile held a certificate
}

func (p *readyProbe) ready(ctx context.Context) bool {
	if p.client == nil {
		pem, err := os.ReadFile(p.certFile)
		if err != nil {
			return false
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return false // not written completely yet
		}
		p.client = &http.Client{Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		}}
	}
	body, err := httpGet(ctx, p.client, p.url, p.token)
	return err == nil && strings.TrimSpace(body) == "ok"
}

func (p *readyProbe) close() {
	if p.client != nil {
		p.client.CloseIdleConnections()
	}
}

// StopAPIServer stops kube-apiserver with sig: SIGTERM for a graceful shutdown, SIGKILL for
// a crash. etcd keeps running.
func (e *Env) StopAPIServer(sig syscall.Signal) error { return e.apiserver.stop(sig, 60*time.Second) }

// RestartAPIServer stops kube-apiserver with sig and starts it again on the same etcd.
func (e *Env) RestartAPIServer(ctx context.Context, sig syscall.Signal) error {
	if err := e.StopAPIServer(sig); err != nil {
		return err
	}
	return e.StartAPIServer(ctx)
}

// Stop kills both processes and removes the temporary directory. It is idempotent.
func (e *Env) Stop() error {
	e.stopOnce.Do(func() {
		var errs []error
		if e.apiserver != nil {
			errs = append(errs, e.apiserver.stop(syscall.SIGKILL, 10*time.Second))
		}
		if e.etcd != nil {
			errs = append(errs, e.etcd.stop(syscall.SIGKILL, 10*time.Second))
		}
		if err := os.RemoveAll(e.dir); err != nil {
			errs = append(errs, fmt.Errorf("testenv: remove %s: %w", e.dir, err))
		}
		e.stopErr = errors.Join(errs...)
	})
	return e.stopErr
}

func (e *Env) readyContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, e.timeout, fmt.Errorf("testenv: not ready after %v", e.timeout))
}

const (
	dirPrefix = "ctrlkit-testenv-"
	ownerFile = "owner.pid"
)

// sweepStaleDirs removes temp directories left behind by test binaries that were killed.
func sweepStaleDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(d)
		}
	}
}

// findBinaries returns the folder holding etcd and kube-apiserver: dir when set, else
// $CTRLKIT_CONTROLPLANE_BIN when set, else DefaultBinDir. It never searches the working
// directory or its parents: a folder anyone can create there (under a shared /tmp, say) must
// not decide what runs as the user. An explicit location must hold them: there is no silent
// fallback from it. The folder and both binaries must pass checkBinDir. The error names the
// command that builds them where Start looks.
func findBinaries(dir string) (string, error) {
	explicit := dir
	if explicit == "" {
		explicit = os.Getenv(BinEnv)
	}
	candidate := explicit
	if candidate == "" {
		d, err := DefaultBinDir()
		if err != nil {
			return "", fmt.Errorf("testenv: no folder holds etcd and kube-apiserver: %w; "+
				"set %s or Config.BinDir to a folder holding them", err, BinEnv)
		}
		candidate = d
	}
	if !haveBinaries(candidate) {
		return "", fmt.Errorf("testenv: etcd and kube-apiserver binaries not found (looked in %s); "+
			"build them with `%s` (in a module that requires ctrlkit; in ctrlkit's repository, `make controlplane`), "+
			"or set %s to a folder holding them",
			candidate, buildCommand(explicit), BinEnv)
	}
	if err := checkBinDir(candidate); err != nil {
		return "", err
	}
	return candidate, nil
}

// checkBinDir returns an *UntrustedBinDirError when dir, etcd or kube-apiserver in it is
// owned by another user than the current one or root, or is writable by its group or by
// others: whoever can write there chooses the code Start runs.
func checkBinDir(dir string) error {
	for _, path := range []string{dir, filepath.Join(dir, "etcd"), filepath.Join(dir, "kube-apiserver")} {
		st, err := os.Stat(path)
		if err != nil {
			return fmt.Errorf("testenv: control-plane binaries: %w", err)
		}
		if st.Mode().Perm()&0o022 != 0 {
			return &UntrustedBinDirError{Path: path, Reason: fmt.Sprintf("writable by its group or others (mode %v)", st.Mode().Perm())}
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Getuid() && sys.Uid != 0 {
			return &UntrustedBinDirError{Path: path, Reason: fmt.Sprintf("owned by uid %d, not by the current user (uid %d) or root", sys.Uid, os.Getuid())}
		}
	}
	return nil
}

// UntrustedBinDirError is the error [Start] returns when the folder of the control-plane
// binaries, or a binary in it, could have been written by someone other than the current
// user. Check for it with errors.As.
type UntrustedBinDirError struct {
	// Path is the folder or binary that failed the check.
	Path string
	// Reason says why: its owner or its mode.
	Reason string
}

func (e *UntrustedBinDirError) Error() string {
	return fmt.Sprintf("testenv: refusing to run the control plane from %s: %s; "+
		"use a folder of your own that only you can write (chmod go-w), or rebuild the binaries there", e.Path, e.Reason)
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

func writeRSAKey(path string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("testenv: generate service-account key: %w", err)
	}
	der := x509.MarshalPKCS1PrivateKey(key)
	b := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: der})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("testenv: write service-account key: %w", err)
	}
	return nil
}

// freePorts returns n distinct free TCP ports on 127.0.0.1. They are held open together so
// that the kernel does not hand out the same one twice.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("testenv: find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
