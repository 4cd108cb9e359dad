package libvirt

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"

	"github.com/labctl/labctl/internal/files"
)

// tlsPort is libvirtd's TLS port (libvirtd.conf tls_port).
const tlsPort = "16514"

// TLSFiles name the PEM files for qemu+tls URIs. An empty field means
// libvirt's own choice for that file.
type TLSFiles struct {
	CAFile, CertFile, KeyFile string
}

// tlsFiles resolves each file the way libvirt's client does
// (src/rpc/virnettlscontext.c, virNetTLSContextLocateCredentials, libvirt
// 9.0): pkipath= names a folder holding all three; else, for a user other
// than root, each file in ~/.pki/libvirt/ when it exists there; else the
// system paths /etc/pki/CA/cacert.pem, /etc/pki/libvirt/clientcert.pem and
// /etc/pki/libvirt/private/clientkey.pem. Files named in lab.yaml win.
func tlsFiles(t target, set TLSFiles) (TLSFiles, error) {
	f := TLSFiles{
		CAFile:   "/etc/pki/CA/cacert.pem",
		CertFile: "/etc/pki/libvirt/clientcert.pem",
		KeyFile:  "/etc/pki/libvirt/private/clientkey.pem",
	}
	pems := []struct {
		name string // in pkipath= and ~/.pki/libvirt
		set  string // from lab.yaml
		dst  *string
	}{{"cacert.pem", set.CAFile, &f.CAFile}, {"clientcert.pem", set.CertFile, &f.CertFile}, {"clientkey.pem", set.KeyFile, &f.KeyFile}}
	userDir := ""
	if os.Geteuid() != 0 {
		if home, err := os.UserHomeDir(); err == nil {
			userDir = filepath.Join(home, ".pki", "libvirt")
		}
	}
	for _, file := range pems {
		switch {
		case file.set != "":
			p, err := files.ExpandHome(file.set)
			if err != nil {
				return f, err
			}
			*file.dst = p
		case t.pkiPath != "":
			*file.dst = filepath.Join(t.pkiPath, file.name)
		case userDir != "" && fileExists(filepath.Join(userDir, file.name)):
			*file.dst = filepath.Join(userDir, file.name)
		}
	}
	return f, nil
}

// tlsConfig loads the CA and the client certificate; the server must
// present a certificate for the URI's host signed by that CA.
func tlsConfig(f TLSFiles, host string) (*tls.Config, error) {
	missing := func(what, path string, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("the %s %s does not exist: put it there (libvirt's usual path) or name it in lab.yaml (hypervisors[].libvirt.tls)", what, path)
		}
		return fmt.Errorf("reading the %s %s: %w", what, path, err)
	}
	ca, err := os.ReadFile(f.CAFile)
	if err != nil {
		return nil, missing("CA certificate", f.CAFile, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("the CA certificate %s holds no PEM certificate", f.CAFile)
	}
	if _, err := os.Stat(f.CertFile); err != nil {
		return nil, missing("client certificate", f.CertFile, err)
	}
	if _, err := os.Stat(f.KeyFile); err != nil {
		return nil, missing("client key", f.KeyFile, err)
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("loading the client certificate %s and key %s: %w", f.CertFile, f.KeyFile, err)
	}
	return &tls.Config{
		RootCAs:      roots,
		Certificates: []tls.Certificate{cert},
		ServerName:   host,
		MinVersion:   tls.VersionTLS12,
	}, nil
}

// dialTLS connects to libvirtd's TLS port. After the handshake the daemon
// checks the client certificate and answers one byte, 1 when it accepts
// it (libvirt src/rpc/virnetserverclient.c; go-libvirt
// socket/dialers/tls.go reads it the same way).
func dialTLS(ctx context.Context, t target, o Options) (net.Conn, error) {
	f, err := tlsFiles(t, o.TLS)
	if err != nil {
		return nil, err
	}
	cfg, err := tlsConfig(f, t.host)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort(t.host, portOr(t.port, tlsPort))
	d := tls.Dialer{Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		var verr *tls.CertificateVerificationError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("the certificate of %s is not valid for %s under the CA %s (is it the right host, and the right CA?): %w", addr, t.host, f.CAFile, err)
		}
		return nil, explainDial(err, addr, "libvirtd's TLS port")
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	b := make([]byte, 1)
	_, err = io.ReadFull(conn, b)
	if !stop() {
		return nil, ctx.Err()
	}
	if err != nil || b[0] != 1 {
		_ = conn.Close()
		return nil, fmt.Errorf("%s refused labctl's client certificate (check that it is signed by the CA libvirtd trusts, and tls_allowed_dn_list in libvirtd.conf): %v", addr, err)
	}
	return conn, nil
}

// explainDial explains a TCP dial that failed before the ctx ended.
func explainDial(err error, addr, what string) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		var dns *net.DNSError
		if errors.As(err, &dns) {
			return fmt.Errorf("cannot resolve the host of %s: check the host name in the URI: %w", addr, err)
		}
		return fmt.Errorf("nothing answers on %s (%s): check the host and that it listens there: %w", addr, what, err)
	}
	return fmt.Errorf("connecting to %s: %w", addr, err)
}
