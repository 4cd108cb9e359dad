package proxmox

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	pve "github.com/luthermonson/go-proxmox"

	"github.com/labctl/labctl/internal/hypervisor"
)

// What 'labctl gc' reads and removes on a Proxmox cluster: the volumes
// labctl made beside its VMs, CAPMOX's clones of labctl's templates, and
// the templates themselves (internal/orphans decides which are orphans).

var _ hypervisor.Leftovers = (*Driver)(nil)

// seedFileRe matches the rest of a seed ISO's file name after
// "labctl-<lab>-": the VM's name and 12 hex digits of the content hash
// (seedName).
var seedFileRe = regexp.MustCompile(`^([a-z0-9][a-z0-9-]*)-([0-9a-f]{12})\.iso$`)

// LabVolumes lists, on every node of lab.yaml, the NoCloud seed ISOs
// labctl uploaded for lab's VMs (imageStorage, labctl-<lab>-<vm>-<hash>.iso)
// and the VM disks owned by a VMID in the vmidRange (storage), each with
// the VM that uses it. It only reads.
func (d *Driver) LabVolumes(ctx context.Context, lab string) ([]hypervisor.Volume, error) {
	res, err := d.resources(ctx, "vm")
	if err != nil {
		return nil, err
	}
	byID := map[int]resource{}
	for _, r := range res {
		if r.Type == "qemu" {
			byID[r.VMID] = r
		}
	}
	attached, err := d.attachedSeeds(ctx, res)
	if err != nil {
		return nil, err
	}
	var out []hypervisor.Volume
	seen := map[string]bool{} // a shared storage lists the same volume on every node
	for _, n := range d.cfg.Nodes {
		isos, err := d.contents(ctx, n.Name, n.ImageStorage, "iso")
		if err != nil {
			return nil, err
		}
		for _, c := range isos {
			vm, ok := seedVM(c.VolID, lab)
			if !ok || seen[c.VolID] {
				continue
			}
			seen[c.VolID] = true
			out = append(out, hypervisor.Volume{Kind: hypervisor.VolumeSeed, Node: n.Name, Storage: n.ImageStorage,
				Name: c.VolID, VM: vm, UsedBy: attached[c.VolID], Bytes: c.Size})
		}
		if d.cfg.VMIDRange == nil {
			continue // no range: no VMID is known to be the lab's
		}
		disks, err := d.diskContents(ctx, n.Name, n.Storage)
		if err != nil {
			return nil, err
		}
		for _, c := range disks {
			if c.VMID < d.cfg.VMIDRange.Start || c.VMID > d.cfg.VMIDRange.End || seen[c.VolID] {
				continue
			}
			seen[c.VolID] = true
			v := hypervisor.Volume{Kind: hypervisor.VolumeDisk, Node: n.Name, Storage: n.Storage, Name: c.VolID, VMID: c.VMID, Bytes: c.Size}
			if r, ok := byID[c.VMID]; ok {
				v.UsedBy, v.VM = vmLabel(r), r.Name
			}
			out = append(out, v)
		}
	}
	return out, nil
}

func vmLabel(r resource) string { return fmt.Sprintf("VM %d (%s)", r.VMID, r.Name) }

// seedVM is the VM a seed ISO's volume ID names, when the file is one
// labctl uploaded for lab.
func seedVM(volid, lab string) (string, bool) {
	_, file, _ := strings.Cut(volid, ":")
	rest, ok := strings.CutPrefix(strings.TrimPrefix(file, "iso/"), "labctl-"+lab+"-")
	if !ok {
		return "", false
	}
	m := seedFileRe.FindStringSubmatch(rest)
	if m == nil {
		return "", false
	}
	return m[1], true
}

type diskContent struct {
	VolID string `json:"volid"`
	VMID  int    `json:"vmid"`
	Size  int64  `json:"size"`
}

func (d *Driver) diskContents(ctx context.Context, node, storage string) ([]diskContent, error) {
	var out []diskContent
	err := d.c.Get(ctx, fmt.Sprintf("/nodes/%s/storage/%s/content?content=images", node, storage), &out)
	return out, api(err, "listing the VM disks of storage %s on node %s", storage, node)
}

// attachedSeeds maps each seed ISO attached to a VM labctl tagged to that
// VM: labctl attaches its seeds only to its own VMs (ide3), so only their
// configs are read.
func (d *Driver) attachedSeeds(ctx context.Context, res []resource) (map[string]string, error) {
	out := map[string]string{}
	for _, r := range res {
		if r.Type != "qemu" || !slices.Contains(splitTags(r.Tags), hypervisor.Tag) {
			continue
		}
		var cfg map[string]any
		err := d.c.Get(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/config", r.Node, r.VMID), &cfg)
		if errors.Is(err, pve.ErrNotFound) {
			continue // deleted while listing
		}
		if err != nil {
			return nil, api(err, "reading the config of VM %d on node %s", r.VMID, r.Node)
		}
		for k, v := range cfg {
			s, ok := v.(string)
			if !ok || !(strings.HasPrefix(k, "ide") || strings.HasPrefix(k, "sata") || strings.HasPrefix(k, "scsi")) {
				continue
			}
			vol, _, _ := strings.Cut(s, ",")
			if strings.Contains(vol, ":iso/labctl-") {
				out[vol] = vmLabel(r)
			}
		}
	}
	return out, nil
}

// DeleteVolume removes a seed ISO or disk volume LabVolumes listed, after
// reading again that no VM uses it.
func (d *Driver) DeleteVolume(ctx context.Context, v hypervisor.Volume) error {
	res, err := d.resources(ctx, "vm")
	if err != nil {
		return err
	}
	switch v.Kind {
	case hypervisor.VolumeSeed:
		attached, err := d.attachedSeeds(ctx, res)
		if err != nil {
			return err
		}
		if by := attached[v.Name]; by != "" {
			return fmt.Errorf("keeping %s on node %s: %s now uses it", v.Name, v.Node, by)
		}
	case hypervisor.VolumeDisk:
		for _, r := range res {
			if r.Type == "qemu" && r.VMID == v.VMID {
				return fmt.Errorf("keeping %s on node %s: %s now owns it", v.Name, v.Node, vmLabel(r))
			}
		}
	default:
		return fmt.Errorf("volume %s: unknown kind %q", v.Name, v.Kind)
	}
	return d.deleteContent(ctx, v.Node, v.Storage, v.Name)
}

// imageOf is the image a labctl template or clone's tags name
// (labctl-image-<image>), or "".
func imageOf(tags []string) string {
	for _, t := range tags {
		if img, ok := strings.CutPrefix(t, hypervisor.ImageTag("")); ok {
			return img
		}
	}
	return ""
}

// DeleteClone stops and deletes a VM CAPMOX cloned from a labctl
// template, with its disks. It reads the VM again first and refuses one
// that has another name than vm's (its VMID was reused), is a template,
// or lacks the template's tags labctl and labctl-image-<image>. A VM
// already gone is not an error.
func (d *Driver) DeleteClone(ctx context.Context, vm hypervisor.VM) error {
	s, err := d.status(ctx, vm)
	if errors.Is(err, pve.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	tags := splitTags(s.Tags)
	if s.Name != vm.Name || !slices.Contains(tags, hypervisor.Tag) || imageOf(tags) == "" {
		return fmt.Errorf("refusing to delete VM %d on node %s: it is now %q with tags %q, not %s cloned from a labctl template", vm.ID, vm.Node, s.Name, s.Tags, vm.Name)
	}
	return d.stopAndDestroy(ctx, vm, s.Status == "running")
}

// DeleteTemplate deletes a template 'labctl image build' made, with its
// disks, after reading again that it is a template of that name with
// the tags labctl and labctl-image-<image>.
func (d *Driver) DeleteTemplate(ctx context.Context, vm hypervisor.VM) error {
	var cfg struct {
		Name     string `json:"name"`
		Tags     string `json:"tags"`
		Template int    `json:"template"`
	}
	err := d.c.Get(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/config", vm.Node, vm.ID), &cfg)
	if errors.Is(err, pve.ErrNotFound) {
		return nil
	}
	if err != nil {
		return api(err, "reading the config of template %d on node %s", vm.ID, vm.Node)
	}
	tags := splitTags(cfg.Tags)
	if cfg.Template != 1 || cfg.Name != vm.Name || !slices.Contains(tags, hypervisor.Tag) || imageOf(tags) == "" {
		return fmt.Errorf("refusing to delete VM %d on node %s: it is now %q with tags %q, not the labctl template %s", vm.ID, vm.Node, cfg.Name, cfg.Tags, vm.Name)
	}
	return d.destroy(ctx, vm)
}
