package proxmox

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	pve "github.com/luthermonson/go-proxmox"

	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/redact"
)

// ConnectTimeout bounds the first contact with the Proxmox API: one
// attempt, no retries, so a host that accepts TCP and never answers is
// named within seconds rather than after every retry of every request.
const ConnectTimeout = 10 * time.Second

// ConnectError is a failed first contact with the Proxmox API: where, what
// happened, and what to check.
type ConnectError struct {
	// URL is the API URL without any userinfo.
	URL string
	// Field is the lab.yaml field the URL comes from.
	Field string
	What  string
	Check string
	// Fingerprint is the SHA-256 fingerprint of the certificate the server
	// presented, in tls.fingerprint's format, when TLS did not hold.
	Fingerprint string
	// NotReached is set when the API was not reached at all (refused, no
	// route, no such host, no answer), as opposed to reached and refusing.
	NotReached bool
	Err        error
}

func (e *ConnectError) Error() string {
	s := fmt.Sprintf("Proxmox API %s (%s): %s", e.URL, e.Field, e.What)
	if e.Fingerprint != "" {
		s += fmt.Sprintf("; the server presented a certificate with SHA-256 fingerprint %s", e.Fingerprint)
	}
	return s + "; check " + e.Check
}

func (e *ConnectError) Unwrap() error { return e.Err }

// Unreachable is the API, what happened and what to check, when it was
// not reached at all (hypervisor.UnreachableOf).
func (e *ConnectError) Unreachable() (hypervisor.Unreachable, bool) {
	if !e.NotReached {
		return hypervisor.Unreachable{}, false
	}
	return hypervisor.Unreachable{API: "the Proxmox API at " + e.URL, Field: e.Field, Reason: e.What, Fix: "check " + e.Check}, true
}

// Endpoint names the API for step lines: "Proxmox API https://host:8006".
func (d *Driver) Endpoint() string { return "Proxmox API " + d.URL() }

// URL is the API URL without any userinfo, for anything printed.
func (d *Driver) URL() string { return redact.URL(d.cfg.URL) }

// Connect asks the API for its version, once, within ConnectTimeout, with
// the token: it proves the address, TLS and the token before anything
// else runs. It returns "PVE <version>".
func (d *Driver) Connect(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, d.o.ConnectTimeout)
	defer cancel()
	rt, ok := d.hc.Transport.(*retryTransport)
	if !ok {
		return "", errors.New("proxmox: the HTTP client has no labctl transport")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(d.cfg.URL, "/")+"/api2/json/version", nil)
	if err != nil {
		return "", d.connectError(err, "the URL does not parse", "that it reads https://<host>:8006")
	}
	req.Header.Set("Authorization", d.auth)
	req.Header.Set("User-Agent", "labctl")
	hc := &http.Client{Transport: rt.base, Timeout: d.o.ConnectTimeout}
	res, err := hc.Do(req)
	if err != nil {
		return "", d.classify(ctx, err)
	}
	defer res.Body.Close()
	switch {
	case res.StatusCode == http.StatusUnauthorized:
		return "", d.connectError(pve.ErrNotAuthorized, "the token "+d.cfg.TokenID+" was refused (401)",
			fmt.Sprintf("%s and the secret %s names, and that the token exists on the node (pveum user token list)", field(d.name, "tokenId"), field(d.name, "tokenSecret")))
	case res.StatusCode != http.StatusOK:
		return "", d.connectError(fmt.Errorf("HTTP %s", res.Status), "it answered "+res.Status+" to GET /api2/json/version",
			"that the URL is the PVE API (https://<host>:8006, no path)")
	}
	var v struct {
		Data struct {
			Version string `json:"version"`
		} `json:"data"`
	}
	if err := decodeJSON(res.Body, &v); err != nil || v.Data.Version == "" {
		return "", d.connectError(err, "its answer to GET /api2/json/version is not PVE's", "that the URL is the PVE API (https://<host>:8006, no path)")
	}
	return "PVE " + v.Data.Version, nil
}

func (d *Driver) connectError(err error, what, check string) *ConnectError {
	return &ConnectError{URL: redact.URL(d.cfg.URL), Field: field(d.name, "url"), What: what, Check: check, Err: err}
}

// notReached is a connectError for an API that was not reached at all.
func (d *Driver) notReached(err error, what, check string) *ConnectError {
	e := d.connectError(err, what, check)
	e.NotReached = true
	return e
}

// classify says what a failed request met, and what to check for it.
func (d *Driver) classify(ctx context.Context, err error) error {
	var fe *FingerprintError
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var dns *net.DNSError
	var op *net.OpError
	switch {
	case errors.As(err, &fe):
		e := d.connectError(err, "the certificate is not the pinned one ("+fe.Want+")",
			"that this is your PVE node, then set "+field(d.name, "tls.fingerprint")+" to the fingerprint below (compare: pvenode cert info on the node)")
		e.Fingerprint = fe.Got
		return e
	case errors.As(err, &cv), errors.As(err, &ua), errors.As(err, &hn), strings.Contains(err.Error(), "x509:"):
		e := d.connectError(err, "TLS verification failed: "+rootCause(err),
			"that this is your PVE node, then set "+field(d.name, "tls.fingerprint")+" to its certificate's fingerprint (compare: pvenode cert info on the node), or "+field(d.name, "tls.caFile")+" to the node's /etc/pve/pve-root-ca.pem")
		e.Fingerprint = d.presented(ctx)
		return e
	case errors.Is(err, context.Canceled) && ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("connecting to the Proxmox API %s: %w", redact.URL(d.cfg.URL), context.Canceled)
	case errors.As(err, &dns):
		return d.notReached(err, "the host name does not resolve ("+dns.Err+")", "the host name in the URL, or use the node's IP address")
	case errors.Is(err, syscall.ECONNREFUSED):
		return d.notReached(err, "the connection was refused", "the port (PVE serves its API on 8006) and that pveproxy runs on the node (systemctl status pveproxy)")
	case errors.As(err, &op) && op.Op == "dial":
		return d.notReached(err, fmt.Sprintf("no connection within %s (%s)", d.o.ConnectTimeout, rootCause(err)), "the address, and that this machine reaches the node (routing, firewall, VLAN)")
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		return d.notReached(err, fmt.Sprintf("it accepted the connection but did not answer within %s", d.o.ConnectTimeout),
			"that the URL names the PVE API (https, port 8006) and not another service, and that pveproxy on the node is not hung")
	}
	return d.connectError(err, rootCause(err), "the URL, and that pveproxy runs on the node")
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// rootCause is the innermost error's text, without url.Error's method and
// URL prefix (the URL is named once, redacted).
func rootCause(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

// presented reads the certificate the server shows, in a TLS handshake of
// its own that sends nothing, so a user can pin it after checking it.
func (d *Driver) presented(ctx context.Context) string {
	u, err := url.Parse(d.cfg.URL)
	if err != nil {
		return ""
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "443")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	dl := &tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, ServerName: u.Hostname()}} //nolint:gosec // only reads the certificate; nothing is sent
	c, err := dl.DialContext(ctx, "tcp", host)
	if err != nil {
		return ""
	}
	defer c.Close()
	certs := c.(*tls.Conn).ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return ""
	}
	return Fingerprint(certs[0])
}
