package proxmox

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/labctl/labctl/internal/hypervisor"
)

type resource struct {
	ID       string  `json:"id"`
	Type     string  `json:"type"`
	Node     string  `json:"node"`
	VMID     int     `json:"vmid"`
	Name     string  `json:"name"`
	Status   string  `json:"status"`
	Template int     `json:"template"`
	Tags     string  `json:"tags"`
	MaxMem   int64   `json:"maxmem"`
	Mem      int64   `json:"mem"`
	MaxCPU   float64 `json:"maxcpu"`
	MaxDisk  int64   `json:"maxdisk"`
	Lock     string  `json:"lock"`
}

func splitTags(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ',' || r == ' ' })
}

func labOf(tags []string) string {
	for _, t := range tags {
		if lab, ok := strings.CutPrefix(t, hypervisor.LabTag("")); ok {
			return lab
		}
	}
	return ""
}

func (r resource) vm() hypervisor.VM {
	tags := splitTags(r.Tags)
	return hypervisor.VM{Name: r.Name, ID: r.VMID, Node: r.Node, Lab: labOf(tags), Running: r.Status == "running",
		Template: r.Template == 1, CPUs: int(r.MaxCPU), MemoryMiB: int(r.MaxMem >> 20), Tags: tags}
}

func (d *Driver) resources(ctx context.Context, kind string) ([]resource, error) {
	var out []resource
	p := "/cluster/resources"
	if kind != "" {
		p += "?type=" + kind
	}
	err := d.c.Get(ctx, p, &out)
	return out, api(err, "listing the cluster's resources")
}

// ListVMs lists the VMs tagged labctl, of lab or of every lab when lab is "".
func (d *Driver) ListVMs(ctx context.Context, lab string) ([]hypervisor.VM, error) {
	res, err := d.resources(ctx, "vm")
	if err != nil {
		return nil, err
	}
	return labVMs(res, lab), nil
}

func labVMs(res []resource, lab string) []hypervisor.VM {
	var out []hypervisor.VM
	for _, r := range res {
		if r.Type != "qemu" {
			continue
		}
		v := r.vm()
		if !slices.Contains(v.Tags, hypervisor.Tag) || v.Lab == "" || (lab != "" && v.Lab != lab) {
			continue
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b hypervisor.VM) int { return a.ID - b.ID })
	return out
}

// FindVM returns the labctl VM of lab named name, or hypervisor.ErrNotFound.
func (d *Driver) FindVM(ctx context.Context, lab, name string) (hypervisor.VM, error) {
	vms, err := d.ListVMs(ctx, lab)
	if err != nil {
		return hypervisor.VM{}, err
	}
	for _, v := range vms {
		if v.Name == name {
			return v, nil
		}
	}
	return hypervisor.VM{}, fmt.Errorf("VM %s of lab %s on %s: %w", name, lab, d.name, hypervisor.ErrNotFound)
}
