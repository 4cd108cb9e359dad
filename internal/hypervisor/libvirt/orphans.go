package libvirt

import (
	"context"
	"fmt"
	"regexp"

	lv "github.com/digitalocean/go-libvirt"

	"github.com/labctl/labctl/internal/hypervisor"
)

var _ hypervisor.Leftovers = (*Driver)(nil)

// leftoverRe matches the volumes CreateVM makes for VM <name>:
// <name>-disk<n>.qcow2 and <name>-seed.iso (diskVolume, dataVolume,
// seedVolume), the names RemoveLeftovers removes.
var leftoverRe = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)-(disk[0-9]+\.qcow2|seed\.iso)$`)

// LabVolumes lists the volumes of the pool named as CreateVM names a
// VM's disks and seed, with the domain that uses each: one whose
// labctl metadata lists it, or any domain of the name it was made for.
// The names carry no lab: a pool two labs share lists both labs'
// volumes. It only reads.
func (d *Driver) LabVolumes(ctx context.Context, _ string) ([]hypervisor.Volume, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, err := d.pool()
	if err != nil {
		return nil, err
	}
	users, err := d.volumeUsers()
	if err != nil {
		return nil, err
	}
	vols, _, err := d.l.StoragePoolListAllVolumes(p, 1, 0)
	if err != nil {
		return nil, fmt.Errorf("listing volumes of pool %s: %w", d.opts.Pool, err)
	}
	var out []hypervisor.Volume
	for _, v := range vols {
		m := leftoverRe.FindStringSubmatch(v.Name)
		if m == nil {
			continue
		}
		kind := hypervisor.VolumeDisk
		if m[3] == "seed.iso" {
			kind = hypervisor.VolumeSeed
		}
		vol := hypervisor.Volume{Kind: kind, Storage: d.opts.Pool, Name: v.Name, VM: m[1], UsedBy: users[v.Name]}
		if vol.UsedBy == "" && users["domain:"+m[1]] != "" {
			vol.UsedBy = users["domain:"+m[1]]
		}
		if _, capacity, _, err := d.l.StorageVolGetInfo(v); err == nil {
			vol.Bytes = int64(capacity)
		}
		out = append(out, vol)
	}
	return out, nil
}

// volumeUsers maps each volume a labctl domain's metadata lists to that
// domain, and "domain:<name>" to every domain on the host, whoever made it.
func (d *Driver) volumeUsers() (map[string]string, error) {
	doms, _, err := d.l.ConnectListAllDomains(1, 0)
	if err != nil {
		return nil, fmt.Errorf("listing VMs on %s: %w", d.opts.Name, err)
	}
	out := map[string]string{}
	for _, dom := range doms {
		label := "domain " + dom.Name
		out["domain:"+dom.Name] = label
		_, meta, err := d.vmOf(dom)
		if isCode(err, lv.ErrNoDomain) {
			continue // deleted while listing
		}
		if err != nil {
			return nil, err
		}
		if meta != nil {
			for _, v := range meta.Volumes {
				out[v] = label
			}
		}
	}
	return out, nil
}

// DeleteVolume removes a volume LabVolumes listed, after reading again
// that no domain uses it.
func (d *Driver) DeleteVolume(ctx context.Context, v hypervisor.Volume) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m := leftoverRe.FindStringSubmatch(v.Name)
	if m == nil {
		return fmt.Errorf("refusing to delete volume %s on %s: labctl does not name a VM's volume so", v.Name, d.opts.Name)
	}
	users, err := d.volumeUsers()
	if err != nil {
		return err
	}
	for _, k := range []string{v.Name, "domain:" + m[1]} {
		if by := users[k]; by != "" {
			return fmt.Errorf("keeping volume %s on %s: %s now uses it", v.Name, d.opts.Name, by)
		}
	}
	p, err := d.pool()
	if err != nil {
		return err
	}
	return d.deleteVolume(p, v.Name)
}
