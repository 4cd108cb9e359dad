// Package drivers opens the hypervisor.Driver for a hypervisor named in
// lab.yaml. It is the one place that knows which implementation serves
// which config section; use cases get a hypervisor.Driver and nothing more.
package drivers

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/libvirt"
	"github.com/labctl/labctl/internal/hypervisor/proxmox"
	"github.com/labctl/labctl/internal/step"
	"github.com/labctl/labctl/internal/ui"
)

// Open connects to the hypervisor called name in lab. Close the driver
// with Close when done.
func Open(ctx context.Context, lab *config.Lab, name string) (hypervisor.Driver, error) {
	return OpenLogged(ctx, lab, name, os.Stderr, 0)
}

// OpenLogged is Open with labctl's -v count: the Proxmox driver traces
// its requests to log from -v on (the token secret never written).
func OpenLogged(ctx context.Context, lab *config.Lab, name string, log io.Writer, verbose int) (hypervisor.Driver, error) {
	h, err := lab.Hypervisor(name)
	if err != nil {
		return nil, err
	}
	switch {
	case h.Libvirt != nil:
		d, err := libvirt.New(ctx, LibvirtOptions(lab, h))
		if err != nil {
			return nil, err
		}
		return d, nil
	case h.Proxmox != nil:
		o, err := ProxmoxOptions(h)
		if err != nil {
			return nil, err
		}
		// Warnings (TLS verification off) go to stderr, like logs.
		o.Warn, o.Log, o.Verbose = log, log, verbose
		return proxmox.New(o)
	}
	return nil, fmt.Errorf("hypervisor %s: neither proxmox nor libvirt is set in lab.yaml", name)
}

// LibvirtOptions maps a libvirt hypervisor of lab.yaml to driver options:
// the lab's network.cidr and gateway define its NAT network when missing.
func LibvirtOptions(lab *config.Lab, h *config.Hypervisor) libvirt.Options {
	lv := h.Libvirt
	o := libvirt.Options{
		Name: h.Name, URI: lv.URI, Pool: lv.StoragePool,
		Network: lv.Network, Bridge: lv.Bridge, DomainType: lv.DomainType,
		SSHKeyFile: lv.SSHKeyFile,
	}
	if t := lv.TLS; t != nil {
		o.TLS = libvirt.TLSFiles{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile}
	}
	if p, err := netip.ParsePrefix(lab.Network.CIDR); err == nil {
		o.Subnet = p.Masked()
	}
	if g, err := netip.ParseAddr(lab.Network.Gateway); err == nil {
		o.Gateway = g
	}
	return o
}

// ProxmoxOptions maps a Proxmox hypervisor of lab.yaml to driver options,
// with the token secret read from the env variable or file lab.yaml
// names. The tuning options are left zero, for the driver's defaults.
func ProxmoxOptions(h *config.Hypervisor) (proxmox.Options, error) {
	if h.Proxmox == nil {
		return proxmox.Options{}, fmt.Errorf("hypervisors[%s]: not a Proxmox hypervisor", h.Name)
	}
	secret, err := h.ReadTokenSecret()
	if err != nil {
		return proxmox.Options{}, err
	}
	return proxmox.Options{Name: h.Name, Endpoint: *h.Proxmox, TokenSecret: secret}, nil
}

// Close closes a driver that holds a connection.
func Close(d hypervisor.Driver) error {
	if c, ok := d.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// ConnectStep is the step "connect to <endpoint>" that a use case runs
// before it talks to d (hypervisor.Connector says why), or false for a
// driver that needs none: libvirt's connects in New.
func ConnectStep(d hypervisor.Driver) (step.Step, bool) {
	c, ok := d.(hypervisor.Connector)
	if !ok {
		return step.Step{}, false
	}
	return step.Step{Name: "connect to " + c.Endpoint(), Check: c.Connect}, true
}

// DryConnectStep is ConnectStep for a dry run. When the hypervisor's API
// cannot be reached, the plan is still worth printing: the step ends with
// a warning, "not checked: <API> is unreachable: <reason>", and the fix,
// the run goes on, and note gets the reason for the later lines to say
// what they could not check. Any other failure (the token or the
// certificate refused) still stops the run: no run works until it is
// fixed.
func DryConnectStep(d hypervisor.Driver, note func(hypervisor.Unreachable)) (step.Step, bool) {
	s, ok := ConnectStep(d)
	if !ok {
		return s, false
	}
	connect := s.Check
	s.Check = func(ctx context.Context) (string, error) {
		v, err := connect(ctx)
		u, unreached := hypervisor.UnreachableOf(err)
		if !unreached || ctx.Err() != nil {
			return v, err
		}
		note(u)
		return "", &step.Warning{Detail: "not checked: " + u.Line(), Fix: []string{u.Fix}}
	}
	return s, true
}

// ReachForPlan is Reach for a dry run, through DryConnectStep: it returns
// the reason when the API was not reached and the plan goes on without it.
func ReachForPlan(ctx context.Context, io *ui.IO, d hypervisor.Driver) (*hypervisor.Unreachable, error) {
	var unreached *hypervisor.Unreachable
	s, ok := DryConnectStep(d, func(u hypervisor.Unreachable) { unreached = &u })
	if !ok {
		return nil, nil
	}
	return unreached, (&step.Runner{IO: io}).Run(ctx, []step.Step{s})
}

// Reach runs ConnectStep on its own, for a use case with no steps of its
// own to put it in. A dead or hung API then fails here, within the
// driver's connect timeout and with progress shown, with the explained
// error every command gives, not with the raw transport error of
// whichever request came first after the client's retries.
func Reach(ctx context.Context, io *ui.IO, d hypervisor.Driver) error {
	s, ok := ConnectStep(d)
	if !ok {
		return nil
	}
	return (&step.Runner{IO: io}).Run(ctx, []step.Step{s})
}
