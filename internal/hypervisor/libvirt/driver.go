//go:build cgo && libvirt_dlopen

package libvirt

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"

	"libvirt.org/go/libvirt"

	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/redact"
)

// Supported is true in builds that carry the libvirt driver.
const Supported = true

// Driver drives one libvirt host. It is safe for concurrent use.
type Driver struct {
	opts Options
	conn *libvirt.Connect

	// upload streams data into a volume; tests on test:///default, which
	// has no volume streams, replace it.
	upload func(ctx context.Context, vol *libvirt.StorageVol, r readerLen) error
	// stage, when set, is called after each step of CreateVM and
	// EnsureImage; tests cancel there to prove interrupted runs converge.
	stage func(name string)

	guestOnce sync.Once
	guest     guestProfile
	guestErr  error
}

var _ hypervisor.Driver = (*Driver)(nil)
var _ hypervisor.HostPreparer = (*Driver)(nil)

// New connects to the host. With the libvirt_dlopen build tag, a missing
// libvirt.so is reported here, and only here.
func New(ctx context.Context, o Options) (*Driver, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	uri, err := connectURI(o.URI)
	if err != nil {
		return nil, fmt.Errorf("libvirt hypervisor %s: %w", o.Name, err)
	}
	type result struct {
		c   *libvirt.Connect
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := libvirt.NewConnect(uri)
		done <- result{c, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("libvirt hypervisor %s: connecting to %s: %w", o.Name, redact.URL(o.URI), explainConnect(r.err))
		}
		d := &Driver{opts: o, conn: r.c}
		d.upload = d.streamUpload
		return d, nil
	case <-ctx.Done():
		// The connect cannot be interrupted; close it when it returns.
		go func() {
			if r := <-done; r.c != nil {
				_, _ = r.c.Close()
			}
		}()
		return nil, fmt.Errorf("libvirt hypervisor %s: connecting to %s: %w", o.Name, redact.URL(o.URI), ctx.Err())
	}
}

// connectURI adds no_tty=1 to ssh URIs so ssh never prompts: the key
// comes from the agent, ~/.ssh or keyfile=, and the host key must already
// be in known_hosts.
func connectURI(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("uri %q: %w", raw, err)
	}
	if strings.HasSuffix(u.Scheme, "+ssh") {
		q := u.Query()
		if q.Get("no_tty") == "" {
			q.Set("no_tty", "1")
			u.RawQuery = q.Encode()
		}
	}
	return u.String(), nil
}

// explainConnect adds the likely fix to common connection failures.
func explainConnect(err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "libvirt.so"):
		return fmt.Errorf("%w: libvirt is not installed on this machine; install it (Debian/Ubuntu: apt-get install libvirt0)", err)
	case strings.Contains(msg, "libvirt-sock") && strings.Contains(msg, "No such file"):
		return fmt.Errorf("%w: is libvirtd running? Start it (systemctl start libvirtd, or libvirtd -d)", err)
	case strings.Contains(msg, "Permission denied"):
		return fmt.Errorf("%w: run as root or as a member of the libvirt group", err)
	case strings.Contains(msg, "Host key verification failed"):
		return fmt.Errorf("%w: add the host's key to ~/.ssh/known_hosts first (ssh to it once)", err)
	}
	return err
}

// Name is the hypervisor's name in lab.yaml.
func (d *Driver) Name() string { return d.opts.Name }

// Close closes the connection.
func (d *Driver) Close() error {
	if _, err := d.conn.Close(); err != nil {
		return fmt.Errorf("closing the connection to %s: %w", redact.URL(d.opts.URI), err)
	}
	return nil
}

func (d *Driver) reached(name string) {
	if d.stage != nil {
		d.stage(name)
	}
}

// isCode reports whether err is a libvirt error with one of the codes.
func isCode(err error, codes ...libvirt.ErrorNumber) bool {
	var lerr libvirt.Error
	if !errors.As(err, &lerr) {
		return false
	}
	for _, c := range codes {
		if lerr.Code == c {
			return true
		}
	}
	return false
}

// pool looks up the configured storage pool.
func (d *Driver) pool() (*libvirt.StoragePool, error) {
	p, err := d.conn.LookupStoragePoolByName(d.opts.Pool)
	if isCode(err, libvirt.ERR_NO_STORAGE_POOL) {
		return nil, fmt.Errorf("storage pool %q does not exist on %s: run 'labctl mgmt up' (it defines it) or set storagePool to an existing pool (virsh pool-list --all): %w", d.opts.Pool, d.opts.Name, hypervisor.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("looking up storage pool %s: %w", d.opts.Pool, err)
	}
	return p, nil
}

// lookupVolume returns the named volume of p, or nil when there is none.
func lookupVolume(p *libvirt.StoragePool, name string) (*libvirt.StorageVol, error) {
	v, err := p.LookupStorageVolByName(name)
	if isCode(err, libvirt.ERR_NO_STORAGE_VOL) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("looking up volume %s: %w", name, err)
	}
	return v, nil
}

// deleteVolume removes the named volume when it exists.
func deleteVolume(p *libvirt.StoragePool, name string) error {
	v, err := lookupVolume(p, name)
	if err != nil || v == nil {
		return err
	}
	defer func() { _ = v.Free() }()
	if err := v.Delete(libvirt.STORAGE_VOL_DELETE_NORMAL); err != nil && !isCode(err, libvirt.ERR_NO_STORAGE_VOL) {
		return fmt.Errorf("deleting volume %s: %w", name, err)
	}
	return nil
}
