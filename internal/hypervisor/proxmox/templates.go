package proxmox

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/labctl/labctl/internal/hypervisor"
)

// Templates lists the VM templates tagged labctl (those 'image build'
// made), sorted by VMID.
func (d *Driver) Templates(ctx context.Context) ([]hypervisor.VM, error) {
	res, err := d.resources(ctx, "vm")
	if err != nil {
		return nil, err
	}
	var out []hypervisor.VM
	for _, r := range res {
		v := r.vm()
		if r.Type == "qemu" && v.Template && slices.Contains(v.Tags, hypervisor.Tag) {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// NodeTemplates lists every VM template on node, tagged or not, from the
// node's VM list (GET /nodes/{node}/qemu), which the node builds from its
// VM configs: image build looks there for the template Packer just made.
func (d *Driver) NodeTemplates(ctx context.Context, node string) ([]hypervisor.VM, error) {
	var res []resource
	if err := d.c.Get(ctx, fmt.Sprintf("/nodes/%s/qemu", node), &res); err != nil {
		return nil, api(err, "listing the VMs of node %s", node)
	}
	var out []hypervisor.VM
	for _, r := range res {
		r.Node = node
		if v := r.vm(); v.Template {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// AddTags adds tags to VM vmid on node, keeping the ones it has. The
// update carries the config digest, so a concurrent change makes it fail
// instead of being overwritten.
func (d *Driver) AddTags(ctx context.Context, node string, vmid int, tags []string) error {
	p := fmt.Sprintf("/nodes/%s/qemu/%d/config", node, vmid)
	var cfg struct {
		Tags   string `json:"tags"`
		Digest string `json:"digest"`
	}
	if err := d.c.Get(ctx, p, &cfg); err != nil {
		return api(err, "reading the config of VM %d on %s", vmid, node)
	}
	have := splitTags(cfg.Tags)
	want := slices.Clone(have)
	for _, t := range tags {
		if !slices.Contains(want, t) {
			want = append(want, t)
		}
	}
	if len(want) == len(have) {
		return nil
	}
	params := map[string]any{"tags": strings.Join(want, ";")}
	if cfg.Digest != "" {
		params["digest"] = cfg.Digest
	}
	var out any
	return api(d.c.Put(ctx, p, params, &out), "tagging VM %d on %s", vmid, node)
}
