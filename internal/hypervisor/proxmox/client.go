// Package proxmox is labctl's Proxmox VE driver: hypervisor.Driver on
// github.com/luthermonson/go-proxmox v0.9.0, with API-token auth, TLS
// verified by default, per-request timeouts, retries with backoff and task
// waits that back off too.
package proxmox

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	pve "github.com/luthermonson/go-proxmox"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/common"
)

// Options say which Proxmox VE endpoint a Driver reaches, with what
// token, and how it behaves; drivers.ProxmoxOptions maps lab.yaml's
// hypervisor to them, as drivers.LibvirtOptions does for libvirt. Zero
// tuning values take the defaults.
type Options struct {
	// Name is the hypervisor's name in lab.yaml; errors name its fields.
	Name string
	// Endpoint is the hypervisor's proxmox section: URL, token id, TLS
	// trust, nodes and VM id range.
	Endpoint config.Proxmox
	// TokenSecret is the API token's secret itself, read from where
	// lab.yaml says it is kept. It is sent only in the Authorization
	// header and never written to Log.
	TokenSecret string
	// Warn receives warnings, e.g. that TLS verification is off.
	Warn io.Writer
	// Log receives request traces: each request from Verbose 1, its body
	// from 2. The token secret is never written to it.
	Log     io.Writer
	Verbose int
	// Timeout bounds each HTTP request (default 30 s).
	Timeout time.Duration
	// ConnectTimeout bounds Connect, the first contact (default
	// ConnectTimeout, 10 s).
	ConnectTimeout time.Duration
	// Retries is the number of attempts per request (default 4).
	Retries int
	// Backoff is the first retry and task-poll wait (default 250 ms); it
	// doubles up to MaxBackoff (default 5 s).
	Backoff, MaxBackoff time.Duration
	// Seed builds the NoCloud seed ISO (label cidata) from a VM's
	// cloud-init data when the spec carries user-data but no SeedISO
	// (default: common.SeedISO, as the libvirt driver uses).
	Seed func(name string, ci hypervisor.CloudInit) ([]byte, error)
}

func (o *Options) defaults() {
	if o.Warn == nil {
		o.Warn = io.Discard
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = ConnectTimeout
	}
	if o.Retries == 0 {
		o.Retries = 4
	}
	if o.Backoff == 0 {
		o.Backoff = 250 * time.Millisecond
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = 5 * time.Second
	}
	if o.Seed == nil {
		o.Seed = common.SeedISO
	}
}

// field names the config path of a hypervisor's setting, for errors.
func field(name, path string) string {
	return fmt.Sprintf("hypervisors[%s].proxmox.%s", name, path)
}

// tlsConfig builds the client TLS config: system roots, or the CA file, or
// a pinned SHA-256 fingerprint of the server certificate. Verification is
// off only with insecureSkipVerify, and then a warning is printed.
func tlsConfig(name string, t config.TLS, warn io.Writer) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		_, pool, err := (&config.Hypervisor{Name: name, Proxmox: &config.Proxmox{TLS: t}}).ReadCAFile()
		if err != nil {
			return nil, err
		}
		tc.RootCAs = pool
	}
	if t.Fingerprint != "" {
		want, err := parseFingerprint(t.Fingerprint)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field(name, "tls.fingerprint"), err)
		}
		roots := tc.RootCAs
		useChain := t.CAFile != ""
		// The pin replaces chain verification (PVE's certificate is
		// self-signed); with a CA file both must hold.
		tc.InsecureSkipVerify = true
		tc.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the server sent no certificate")
			}
			leaf := cs.PeerCertificates[0]
			sum := sha256.Sum256(leaf.Raw)
			if !bytes.Equal(sum[:], want) {
				return &FingerprintError{Want: formatFingerprint(want), Got: formatFingerprint(sum[:])}
			}
			if useChain {
				inter := x509.NewCertPool()
				for _, c := range cs.PeerCertificates[1:] {
					inter.AddCert(c)
				}
				_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: cs.ServerName})
				return err
			}
			return nil
		}
		return tc, nil
	}
	if t.InsecureSkipVerify {
		tc.InsecureSkipVerify = true
		fmt.Fprintf(warn, "warning: TLS verification is off for hypervisor %s (%s): anyone on the network path can read the API token; set tls.caFile or tls.fingerprint instead\n",
			name, field(name, "tls.insecureSkipVerify"))
	}
	return tc, nil
}

// FingerprintError is a TLS handshake that met a certificate other than the pinned one.
type FingerprintError struct{ Want, Got string }

func (e *FingerprintError) Error() string {
	return fmt.Sprintf("the server certificate's SHA-256 fingerprint is %s, not the pinned %s (tls.fingerprint): check the host, then update the pin", e.Got, e.Want)
}

func parseFingerprint(s string) ([]byte, error) {
	h := strings.ToLower(strings.NewReplacer(":", "", " ", "").Replace(strings.TrimPrefix(strings.ToLower(s), "sha256:")))
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != sha256.Size {
		return nil, fmt.Errorf("%q is not a SHA-256 fingerprint (64 hex digits, colons allowed)", s)
	}
	return b, nil
}

func formatFingerprint(b []byte) string {
	parts := make([]string, len(b))
	for i, x := range b {
		parts[i] = fmt.Sprintf("%02X", x)
	}
	return strings.Join(parts, ":")
}

// Fingerprint is the SHA-256 fingerprint of a certificate, as tls.fingerprint takes it.
func Fingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return formatFingerprint(sum[:])
}

// redactor replaces the secret wherever it would be written.
type redactor struct {
	mu     sync.Mutex
	w      io.Writer
	secret string
}

func (r *redactor) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := p
	if r.secret != "" && bytes.Contains(p, []byte(r.secret)) {
		out = bytes.ReplaceAll(p, []byte(r.secret), []byte("<redacted>"))
	}
	if _, err := r.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// logger adapts go-proxmox's leveled logger to labctl's verbosity: the
// line naming each request (SEND: GET - URL) appears from -v on, the rest
// of its debug lines (request bodies) from -vv on.
type logger struct {
	w       io.Writer
	verbose int
}

func (l logger) line(min int, prefix, format string, args ...any) {
	if l.verbose >= min {
		fmt.Fprintf(l.w, prefix+format+"\n", args...)
	}
}

func (l logger) Errorf(format string, args ...any) { l.line(0, "proxmox: error: ", format, args...) }
func (l logger) Warnf(format string, args ...any)  { l.line(1, "proxmox: warning: ", format, args...) }
func (l logger) Infof(format string, args ...any)  { l.line(1, "proxmox: ", format, args...) }
func (l logger) Debugf(format string, args ...any) {
	if strings.HasPrefix(format, "SEND:") {
		l.line(1, "proxmox: ", format, args...)
		return
	}
	l.line(2, "proxmox: ", format, args...)
}

var _ pve.LeveledLoggerInterface = logger{}

// newClient builds the go-proxmox client for one hypervisor.
func newClient(o Options) (*pve.Client, *http.Client, error) {
	p, secret := o.Endpoint, o.TokenSecret
	tc, err := tlsConfig(o.Name, p.TLS, o.Warn)
	if err != nil {
		return nil, nil, err
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.TLSClientConfig = tc
	hc := &http.Client{Transport: &retryTransport{base: base, attempts: o.Retries, timeout: o.Timeout,
		backoff: o.Backoff, maxBackoff: o.MaxBackoff}}
	log := &redactor{w: o.Log, secret: secret}
	c := pve.NewClient(strings.TrimSuffix(p.URL, "/")+"/api2/json",
		pve.WithHTTPClient(hc),
		pve.WithAPIToken(p.TokenID, secret),
		pve.WithUserAgent("labctl"),
		pve.WithLogger(logger{w: log, verbose: o.Verbose}),
	)
	return c, hc, nil
}
