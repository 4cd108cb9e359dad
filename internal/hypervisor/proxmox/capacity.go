package proxmox

import (
	"context"
	"slices"

	"github.com/labctl/labctl/internal/hypervisor"
)

// Capacity reports each node's memory and what its VMs reserve: the
// configured memory of every non-template VM, stopped ones included, as
// CAPMOX counts it. One request.
func (d *Driver) Capacity(ctx context.Context) ([]hypervisor.NodeCapacity, error) {
	res, err := d.resources(ctx, "")
	if err != nil {
		return nil, err
	}
	return capacity(res), nil
}

func capacity(res []resource) []hypervisor.NodeCapacity {
	byNode := map[string]*hypervisor.NodeCapacity{}
	var order []string
	for _, r := range res {
		if r.Type == "node" {
			byNode[r.Node] = &hypervisor.NodeCapacity{Node: r.Node, CPUs: int(r.MaxCPU), MemoryMiB: int(r.MaxMem >> 20)}
			order = append(order, r.Node)
		}
	}
	for _, r := range res {
		n := byNode[r.Node]
		if r.Type != "qemu" || n == nil || r.Template == 1 {
			continue
		}
		n.VMs++
		n.ReservedMiB += int(r.MaxMem >> 20)
		if r.Status == "running" {
			n.RunningVMs++
			n.MemoryUsedMiB += int(r.Mem >> 20)
		}
	}
	slices.Sort(order)
	out := make([]hypervisor.NodeCapacity, 0, len(order))
	for _, name := range order {
		out = append(out, *byNode[name])
	}
	return out
}
