package libvirt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	lv "github.com/digitalocean/go-libvirt"

	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/redact"
)

// Driver drives one libvirt host. It is safe for concurrent use.
type Driver struct {
	opts Options
	l    *lv.Libvirt

	// upload streams data into a volume; tests on test:///default, whose
	// driver has no volume streams, replace it.
	upload func(ctx context.Context, vol lv.StorageVol, r readerLen) error
	// stage, when set, is called after each step of CreateVM and
	// EnsureImage; tests cancel there to prove interrupted runs converge.
	stage func(name string)

	guestOnce sync.Once
	guest     guestProfile
	guestErr  error
}

var _ hypervisor.Driver = (*Driver)(nil)
var _ hypervisor.HostPreparer = (*Driver)(nil)

// New connects to the host within Options.DialTimeout; ctx ends the
// attempt at once. Each way a host can be unreachable gets its own error
// saying what to do.
func New(ctx context.Context, o Options) (*Driver, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	t, err := parseURI(o.URI)
	if err != nil {
		return nil, fmt.Errorf("libvirt hypervisor %s: %w", o.Name, err)
	}
	dctx, cancel := context.WithTimeout(ctx, o.dialTimeout())
	defer cancel()
	l, err := connect(dctx, t, o)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			err = ctx.Err()
		case dctx.Err() != nil:
			err = notAnswering(t, o.dialTimeout())
		}
		return nil, fmt.Errorf("libvirt hypervisor %s: connecting to %s: %w", o.Name, redact.URL(o.URI), err)
	}
	d := &Driver{opts: o, l: l}
	d.upload = d.streamUpload
	if o.Upload != nil {
		d.upload = func(ctx context.Context, vol lv.StorageVol, r readerLen) error {
			return o.Upload(ctx, vol.Name, r.Reader, r.Len)
		}
	}
	return d, nil
}

// notAnswering is the error for a host that let the dial timeout pass.
func notAnswering(t target, after time.Duration) error {
	switch t.transport {
	case "ssh":
		return fmt.Errorf("%s did not answer within %s: check that the host is up and that sshd listens on port %s", t.host, after, portOr(t.port, "22"))
	case "tls":
		return fmt.Errorf("%s did not answer within %s: check that the host is up and that libvirtd listens for TLS on port %s (listen_tls = 1)", t.host, after, portOr(t.port, tlsPort))
	}
	return fmt.Errorf("the local libvirtd did not answer within %s: it may be hung; restart it (systemctl restart libvirtd)", after)
}

func portOr(port, def string) string {
	if port == "" {
		return def
	}
	return port
}

// Name is the hypervisor's name in lab.yaml.
func (d *Driver) Name() string { return d.opts.Name }

// Close closes the connection.
func (d *Driver) Close() error {
	if err := d.l.Disconnect(); err != nil {
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
func isCode(err error, codes ...lv.ErrorNumber) bool {
	var lerr lv.Error
	if !errors.As(err, &lerr) {
		return false
	}
	for _, c := range codes {
		if lerr.Code == uint32(c) {
			return true
		}
	}
	return false
}

// pool looks up the configured storage pool.
func (d *Driver) pool() (lv.StoragePool, error) {
	p, err := d.l.StoragePoolLookupByName(d.opts.Pool)
	if isCode(err, lv.ErrNoStoragePool) {
		return p, fmt.Errorf("storage pool %q does not exist on %s: run 'labctl mgmt up' (it defines it) or set storagePool to an existing pool (virsh pool-list --all): %w", d.opts.Pool, d.opts.Name, hypervisor.ErrNotFound)
	}
	if err != nil {
		return p, fmt.Errorf("looking up storage pool %s: %w", d.opts.Pool, err)
	}
	return p, nil
}

// lookupVolume returns the named volume of p; ok is false when there is
// none.
func (d *Driver) lookupVolume(p lv.StoragePool, name string) (v lv.StorageVol, ok bool, err error) {
	v, err = d.l.StorageVolLookupByName(p, name)
	if isCode(err, lv.ErrNoStorageVol) {
		return v, false, nil
	}
	if err != nil {
		return v, false, fmt.Errorf("looking up volume %s: %w", name, err)
	}
	return v, true, nil
}

// deleteVolume removes the named volume when it exists.
func (d *Driver) deleteVolume(p lv.StoragePool, name string) error {
	v, ok, err := d.lookupVolume(p, name)
	if err != nil || !ok {
		return err
	}
	if err := d.l.StorageVolDelete(v, lv.StorageVolDeleteNormal); err != nil && !isCode(err, lv.ErrNoStorageVol) {
		return fmt.Errorf("deleting volume %s: %w", name, err)
	}
	return nil
}
