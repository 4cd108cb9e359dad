//go:build cgo && libvirt_dlopen

package libvirt

import (
	"context"
	"fmt"

	"libvirt.org/go/libvirt"

	"github.com/labctl/labctl/internal/hypervisor"
)

// Capacity reports the host as one node: its CPUs and memory, the memory
// every defined domain is configured with (stopped ones too, as a
// scheduler that reserves configured memory would count it), and what is
// in use now.
func (d *Driver) Capacity(ctx context.Context) ([]hypervisor.NodeCapacity, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	info, err := d.conn.GetNodeInfo()
	if err != nil {
		return nil, fmt.Errorf("reading the resources of %s: %w", d.opts.Name, err)
	}
	free, err := d.conn.GetFreeMemory()
	if err != nil {
		return nil, fmt.Errorf("reading the free memory of %s: %w", d.opts.Name, err)
	}
	host, _ := d.conn.GetHostname()
	doms, err := d.conn.ListAllDomains(0)
	if err != nil {
		return nil, fmt.Errorf("listing VMs on %s: %w", d.opts.Name, err)
	}
	nc := hypervisor.NodeCapacity{
		Node:      host,
		CPUs:      int(info.Cpus),
		MemoryMiB: int(info.Memory / 1024),
	}
	nc.MemoryUsedMiB = nc.MemoryMiB - int(free>>20)
	for i := range doms {
		di, err := doms[i].GetInfo()
		_ = doms[i].Free()
		if err != nil {
			continue // deleted while listing
		}
		nc.VMs++
		nc.ReservedMiB += int(di.MaxMem / 1024)
		if di.State != libvirt.DOMAIN_SHUTOFF && di.State != libvirt.DOMAIN_CRASHED {
			nc.RunningVMs++
		}
	}
	return []hypervisor.NodeCapacity{nc}, nil
}
