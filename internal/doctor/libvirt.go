package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime/debug"
	"strings"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/hypervisor/libvirt"
	"github.com/labctl/labctl/internal/redact"
)

// libvirtModule is the pure-Go libvirt client labctl is built with.
const libvirtModule = "github.com/digitalocean/go-libvirt"

// checkLibvirt checks each libvirt host of the lab as mgmt up will use
// it: the client in this build, the connection, the storage pool, the
// NAT network, and whether VMs get KVM or only TCG. It reads only: a
// missing pool or network is what mgmt up defines, so it is a warning.
func (r *Report) checkLibvirt(ctx context.Context, o Options, lab *config.Lab) {
	first := true
	for i := range lab.Hypervisors {
		h := &lab.Hypervisors[i]
		if h.Libvirt == nil {
			continue
		}
		if first {
			r.add("libvirt support", OK, libvirtSupport())
			first = false
		}
		r.checkLibvirtHost(ctx, o, lab, h)
	}
}

// libvirtSupport names the libvirt client compiled into this binary.
func libvirtSupport() string {
	version := "version unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == libvirtModule {
				version = m.Version
				if m.Replace != nil {
					version = m.Replace.Version
				}
			}
		}
	}
	return fmt.Sprintf("built in: libvirt's RPC protocol in pure Go (%s %s), over unix, ssh and TLS; no libvirt library needed", libvirtModule, version)
}

func (r *Report) checkLibvirtHost(ctx context.Context, o Options, lab *config.Lab, h *config.Hypervisor) {
	name := "libvirt " + h.Name
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	opts := drivers.LibvirtOptions(lab, h)
	opts.DialTimeout = timeout
	d, err := libvirt.New(ctx, opts)
	if err != nil {
		r.add(name, Fail, err.Error())
		return
	}
	defer func() { _ = d.Close() }()
	r.add(name, OK, "connected to "+redact.URL(h.Libvirt.URI))

	pool, network, err := d.HostState(ctx)
	if err != nil {
		r.add(name+" pool", Fail, err.Error())
		return
	}
	r.add(name+" pool", stateStatus(pool), stateDetail("storage pool", h.Libvirt.StoragePool, pool))
	switch {
	case h.Libvirt.Network != "":
		r.add(name+" network", stateStatus(network), stateDetail("network", h.Libvirt.Network, network))
	case h.Libvirt.Bridge != "":
		r.add(name+" network", OK, fmt.Sprintf("VMs join bridge %s (a host bridge; labctl does not manage it)", h.Libvirt.Bridge))
	}

	typ, err := d.DomainType()
	switch {
	case err != nil:
		r.add(name+" virtualisation", Fail, err.Error())
	case typ == "kvm":
		r.add(name+" virtualisation", OK, "KVM: hardware virtualisation")
	case typ == "qemu":
		r.add(name+" virtualisation", Warn, "TCG only (software emulation), so VMs run many times slower"+whyNoKVM(h.Libvirt.URI))
	default:
		r.add(name+" virtualisation", Warn, fmt.Sprintf("domain type %q: neither KVM nor TCG; this host runs no real VMs", typ))
	}
}

func stateStatus(state string) Status {
	if state == "active" {
		return OK
	}
	return Warn
}

func stateDetail(what, name, state string) string {
	switch state {
	case "missing":
		return fmt.Sprintf("%s %s does not exist yet: labctl mgmt up defines and starts it", what, name)
	case "inactive":
		return fmt.Sprintf("%s %s is defined but stopped: labctl mgmt up starts it", what, name)
	}
	return fmt.Sprintf("%s %s is active", what, name)
}

// whyNoKVM adds the likely reason when the host is this machine.
func whyNoKVM(uri string) string {
	if !strings.HasPrefix(uri, "qemu:///") {
		return ": the host's CPU lacks vmx/svm, or KVM is not loaded there"
	}
	if _, err := os.Stat("/dev/kvm"); errors.Is(err, fs.ErrNotExist) {
		return ": /dev/kvm does not exist here (no vmx/svm in the CPU, nested virtualisation off, or the kvm module not loaded)"
	}
	return ": the CPU lacks vmx/svm as libvirt sees it"
}
