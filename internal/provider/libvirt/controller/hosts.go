package controller

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/hypervisor/libvirt"
	"github.com/labctl/labctl/internal/provider/libvirt/api/v1alpha1"
	"github.com/labctl/labctl/internal/redact"
)

// defaultDialTimeout bounds reaching one host: a host that does not
// answer must not hold a reconcile for libvirt's 20s.
const defaultDialTimeout = 10 * time.Second

// Hosts connects to a LibvirtCluster's hosts.
type Hosts struct {
	// Secrets reads the credentials Secrets (an uncached reader: the
	// provider caches no Secrets).
	Secrets client.Reader
	// DialTimeout bounds reaching one host; zero means 10s.
	DialTimeout time.Duration
	// Options, when set, adjusts each host's driver options; tests set
	// libvirt.Options.Upload there (libvirt's test driver has no volume
	// streams).
	Options func(host string, o *libvirt.Options)
}

// noPool names the pool of a connection that works in none.
const noPool = "-"

// host is one connected host, or why it could not be reached.
type host struct {
	spec v1alpha1.LibvirtHost
	d    *libvirt.Driver
	err  error
}

// connectAll connects to every host at once, with pool as the storage
// pool its driver works in ("" for a connection that only checks the
// host answers). Each result carries its driver or its error; close
// them with closeAll.
func (h Hosts) connectAll(ctx context.Context, lc *v1alpha1.LibvirtCluster, pool string) []*host {
	out := make([]*host, len(lc.Spec.Hosts))
	var wg sync.WaitGroup
	for i, spec := range lc.Spec.Hosts {
		out[i] = &host{spec: spec}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].d, out[i].err = h.connect(ctx, lc, spec, pool)
		}()
	}
	wg.Wait()
	return out
}

func closeAll(hosts []*host) {
	for _, h := range hosts {
		if h.d != nil {
			_ = h.d.Close()
		}
	}
}

// connect reaches one host with the credentials from its Secret. They
// are written to a private folder (0700, files 0600) only for the
// handshake: the libvirt driver reads key, known_hosts and certificates
// from files, as libvirt's own client does.
func (h Hosts) connect(ctx context.Context, lc *v1alpha1.LibvirtCluster, spec v1alpha1.LibvirtHost, pool string) (*libvirt.Driver, error) {
	var sec corev1.Secret
	key := client.ObjectKey{Namespace: lc.Namespace, Name: spec.CredentialsRef.Name}
	if err := h.Secrets.Get(ctx, key, &sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, credentialsError{fmt.Errorf("host %s: its credentials Secret %s does not exist in namespace %s (hosts[].credentialsRef.name)", spec.Name, key.Name, key.Namespace)}
		}
		return nil, fmt.Errorf("host %s: reading its credentials Secret %s: %w", spec.Name, key.Name, err)
	}
	// Named after the Secret: the driver's errors name the files.
	dir, err := os.MkdirTemp("", "labctl-provider-"+key.Namespace+"-"+key.Name+"-")
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", spec.Name, err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	write := func(k string) (string, error) {
		v, ok := sec.Data[k]
		if !ok || len(v) == 0 {
			return "", credentialsError{fmt.Errorf("host %s: its credentials Secret %s has no %s key (a %s URI needs %s)", spec.Name, key.Name, k, transport(spec.URI), strings.Join(needs(spec.URI), ", "))}
		}
		p := filepath.Join(dir, k)
		return p, os.WriteFile(p, v, 0o600)
	}
	o := libvirt.Options{
		Name: spec.Name, URI: spec.URI, Pool: pool,
		Network: lc.Spec.Network.Network, Bridge: lc.Spec.Network.Bridge,
		DialTimeout: h.DialTimeout,
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = defaultDialTimeout
	}
	if o.Pool == "" {
		// The cluster's check of its hosts works in no pool; the
		// driver wants one named.
		o.Pool = noPool
	}
	switch transport(spec.URI) {
	case "ssh":
		if o.SSHKeyFile, err = write(v1alpha1.KeySSHPrivateKey); err == nil {
			o.KnownHostsFile, err = write(v1alpha1.KeyKnownHosts)
		}
	case "tls":
		if o.TLS.CAFile, err = write(v1alpha1.KeyCA); err == nil {
			if o.TLS.CertFile, err = write(v1alpha1.KeyTLSCert); err == nil {
				o.TLS.KeyFile, err = write(v1alpha1.KeyTLSKey)
			}
		}
	default:
		err = credentialsError{fmt.Errorf("host %s: uri %s is neither qemu+ssh:// nor qemu+tls://", spec.Name, redact.URL(spec.URI))}
	}
	if err != nil {
		return nil, err
	}
	if h.Options != nil {
		h.Options(spec.Name, &o)
	}
	d, err := libvirt.New(ctx, o)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// credentialsError is a Secret that is missing or lacks a key: the
// user's to fix, reported as CredentialsInvalid.
type credentialsError struct{ error }

func (e credentialsError) Unwrap() error { return e.error }

func isCredentialsError(err error) bool {
	var c credentialsError
	return errors.As(err, &c)
}

// transport is ssh or tls, from driver+transport://.
func transport(uri string) string {
	scheme, _, _ := strings.Cut(uri, "://")
	_, t, _ := strings.Cut(scheme, "+")
	return t
}

func needs(uri string) []string {
	if transport(uri) == "ssh" {
		return []string{v1alpha1.KeySSHPrivateKey, v1alpha1.KeyKnownHosts}
	}
	return []string{v1alpha1.KeyCA, v1alpha1.KeyTLSCert, v1alpha1.KeyTLSKey}
}
