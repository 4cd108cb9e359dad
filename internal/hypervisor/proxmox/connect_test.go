package proxmox

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/testing/pvetest"
	"github.com/labctl/labctl/internal/testing/testbed"
)

// TestConnectSilentAPI: one attempt, bounded, naming the URL without its
// userinfo, what happened and what to check.
func TestConnectSilentAPI(t *testing.T) {
	srv := pvetest.New(t)
	hung := testbed.StartSilent(t)
	addr := hung.Addr
	h := hv(srv)
	h.Proxmox.URL = "https://root%40pam:hunter2-not-printed@" + addr
	var buf bytes.Buffer
	o := fastOptions(t, srv, &buf)
	o.ConnectTimeout = 300 * time.Millisecond
	d, err := newFor(h, o)
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Connect(ctx(t))
	var ce *ConnectError
	if !errors.As(err, &ce) {
		t.Fatalf("Connect = %v, want a ConnectError", err)
	}
	msg := err.Error()
	for _, want := range []string{"Proxmox API https://REDACTED@" + addr, "hypervisors[pve].proxmox.url", "accepted the connection but did not answer within 300ms", "check that the URL names the PVE API"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q: %s", want, msg)
		}
	}
	if strings.Contains(msg+buf.String(), "hunter2") || strings.Contains(msg, "root%40pam") {
		t.Errorf("the URL's userinfo was printed: %s", msg)
	}
	if n := hung.Conns(); n != 1 {
		t.Errorf("%d connections, want 1: the first contact is not retried", n)
	}
	if d.Endpoint() != "Proxmox API https://REDACTED@"+addr {
		t.Errorf("Endpoint = %q", d.Endpoint())
	}
}

// TestConnectCertificate: without a pin or CA the self-signed certificate
// fails, and the error prints its fingerprint in the form tls.fingerprint
// takes: pinning that very string then connects.
func TestConnectCertificate(t *testing.T) {
	srv := pvetest.New(t)
	h := hv(srv)
	h.Proxmox.TLS = config.TLS{}
	d, _ := newDriver(t, srv, h)
	_, err := d.Connect(ctx(t))
	var ce *ConnectError
	if !errors.As(err, &ce) || ce.Fingerprint != Fingerprint(srv.Certificate()) {
		t.Fatalf("Connect = %v (fingerprint %q), want the server's %s", err, ce.Fingerprint, Fingerprint(srv.Certificate()))
	}
	for _, want := range []string{"TLS verification failed", "SHA-256 fingerprint " + ce.Fingerprint, "hypervisors[pve].proxmox.tls.fingerprint"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	h.Proxmox.TLS = config.TLS{Fingerprint: ce.Fingerprint}
	d, _ = newDriver(t, srv, h)
	if v, err := d.Connect(ctx(t)); err != nil || !strings.HasPrefix(v, "PVE ") {
		t.Fatalf("pinned to the printed fingerprint: %q, %v", v, err)
	}

	// A pin that does not match names both.
	h.Proxmox.TLS = config.TLS{Fingerprint: strings.Repeat("AB:", 31) + "AB"}
	d, _ = newDriver(t, srv, h)
	_, err = d.Connect(ctx(t))
	if !errors.As(err, &ce) || ce.Fingerprint != Fingerprint(srv.Certificate()) || !strings.Contains(err.Error(), "not the pinned one") {
		t.Fatalf("wrong pin: %v", err)
	}
}

// TestConnectRefusedAndToken: a closed port and a wrong token each say
// what to check. Only the closed port counts as unreachable, which a dry
// run plans past; a refused token stops every run.
func TestConnectRefusedAndToken(t *testing.T) {
	srv := pvetest.New(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	h := hv(srv)
	h.Proxmox.URL = "https://" + closed
	d, _ := newDriver(t, srv, h)
	_, err = d.Connect(ctx(t))
	if err == nil || !strings.Contains(err.Error(), "connection was refused") || !strings.Contains(err.Error(), "8006") {
		t.Errorf("closed port: %v", err)
	}
	if u, ok := hypervisor.UnreachableOf(err); !ok || u.API != "the Proxmox API at https://"+closed || u.Reason != "the connection was refused" || !strings.HasPrefix(u.Fix, "check the port") {
		t.Errorf("closed port: unreachable %v, %+v", ok, u)
	}
	h = hv(srv)
	var buf bytes.Buffer
	o := fastOptions(t, srv, &buf)
	t.Setenv("PVE_TOKEN_SECRET", "wrong-secret")
	d, err = newFor(h, o)
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Connect(ctx(t))
	if err == nil || !strings.Contains(err.Error(), "was refused (401)") || strings.Contains(err.Error(), "wrong-secret") {
		t.Errorf("wrong token: %v", err)
	}
	if _, ok := hypervisor.UnreachableOf(err); ok {
		t.Errorf("a refused token counts as an unreachable API: %v", err)
	}
}
