package libvirt

import (
	"context"
	"fmt"

	lv "github.com/digitalocean/go-libvirt"

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
	_, memKiB, cpus, _, _, _, _, _, err := d.l.NodeGetInfo()
	if err != nil {
		return nil, fmt.Errorf("reading the resources of %s: %w", d.opts.Name, err)
	}
	free, err := d.l.NodeGetFreeMemory()
	if err != nil {
		return nil, fmt.Errorf("reading the free memory of %s: %w", d.opts.Name, err)
	}
	host, _ := d.l.ConnectGetHostname()
	doms, _, err := d.l.ConnectListAllDomains(1, 0)
	if err != nil {
		return nil, fmt.Errorf("listing VMs on %s: %w", d.opts.Name, err)
	}
	nc := hypervisor.NodeCapacity{
		Node:      host,
		CPUs:      int(cpus),
		MemoryMiB: int(memKiB / 1024),
	}
	nc.MemoryUsedMiB = nc.MemoryMiB - int(free>>20)
	for _, dom := range doms {
		state, maxMemKiB, _, _, _, err := d.l.DomainGetInfo(dom)
		if err != nil {
			continue // deleted while listing
		}
		nc.VMs++
		nc.ReservedMiB += int(maxMemKiB / 1024)
		if s := lv.DomainState(state); s != lv.DomainShutoff && s != lv.DomainCrashed {
			nc.RunningVMs++
		}
	}
	return []hypervisor.NodeCapacity{nc}, nil
}
