package libvirt

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	lv "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/common"
)

var _ hypervisor.Leftovers = (*Driver)(nil)

// leftoverRe matches the volumes CreateVM makes for VM <name>:
// <name>-disk<n>.qcow2 and <name>-seed.iso (diskVolume, dataVolume,
// seedVolume), the names RemoveLeftovers removes.
var leftoverRe = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)-(disk[0-9]+\.qcow2|seed\.iso)$`)

// LabVolumes lists the volumes of the pool named as CreateVM names a
// VM's disks and seed, with the domain that uses each: one whose
// labctl metadata lists it, or any domain of the name it was made for.
// It also lists the node images labctl uploaded: volumes with a
// verified-upload marker (<volume>.sha256-<hex>, written only after the
// upload was read back), each with the disk that is a qcow2 overlay on
// it. The names carry no lab: a pool two labs share lists both labs'
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
	backed, err := d.backingUsers(vols)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(vols))
	for i, v := range vols {
		names[i] = v.Name
	}
	var out []hypervisor.Volume
	for _, v := range vols {
		var vol hypervisor.Volume
		if m := leftoverRe.FindStringSubmatch(v.Name); m != nil {
			kind := hypervisor.VolumeDisk
			if m[3] == "seed.iso" {
				kind = hypervisor.VolumeSeed
			}
			vol = hypervisor.Volume{Kind: kind, Storage: d.opts.Pool, Name: v.Name, VM: m[1], UsedBy: users[v.Name]}
			if vol.UsedBy == "" && users["domain:"+m[1]] != "" {
				vol.UsedBy = users["domain:"+m[1]]
			}
		} else if hasMarker(names, v.Name) {
			vol = hypervisor.Volume{Kind: hypervisor.VolumeImage, Storage: d.opts.Pool, Name: v.Name, UsedBy: backed[d.volPath(v)]}
		} else {
			continue
		}
		if _, capacity, _, err := d.l.StorageVolGetInfo(v); err == nil {
			vol.Bytes = int64(capacity)
		}
		out = append(out, vol)
	}
	return out, nil
}

// hasMarker reports whether names hold a verified-upload marker of
// volume name.
func hasMarker(names []string, name string) bool {
	for _, n := range names {
		if sum, ok := strings.CutPrefix(n, markerPrefix(name)); ok && common.IsSHA256(sum) {
			return true
		}
	}
	return false
}

// volPath is the path an overlay on v names as its backing file
// (createOverlay takes it from StorageVolGetPath); the key, which is the
// path in directory pools, if the host does not say.
func (d *Driver) volPath(v lv.StorageVol) string {
	if path, err := d.l.StorageVolGetPath(v); err == nil {
		return path
	}
	return v.Key
}

// backingUsers maps the path of each volume a VM's disk (a qcow2
// overlay CreateVM made) is backed by to that disk.
func (d *Driver) backingUsers(vols []lv.StorageVol) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range vols {
		if m := leftoverRe.FindStringSubmatch(v.Name); m == nil || m[3] == "seed.iso" {
			continue
		}
		x, err := d.l.StorageVolGetXMLDesc(v, 0)
		if isCode(err, lv.ErrNoStorageVol) {
			continue // deleted while listing
		}
		if err != nil {
			return nil, fmt.Errorf("reading volume %s in pool %s: %w", v.Name, d.opts.Pool, err)
		}
		var sv libvirtxml.StorageVolume
		if err := sv.Unmarshal(x); err != nil {
			return nil, fmt.Errorf("reading volume %s in pool %s: %w", v.Name, d.opts.Pool, err)
		}
		if sv.BackingStore != nil && sv.BackingStore.Path != "" {
			out[sv.BackingStore.Path] = "disk " + v.Name + " (a qcow2 overlay on it)"
		}
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
	if v.Kind == hypervisor.VolumeImage {
		return d.deleteNodeImage(v)
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

// deleteNodeImage removes a node image LabVolumes listed and its
// markers, after reading again that labctl uploaded it and that no disk
// is backed by it. The volume goes first: a marker left by an
// interruption marks nothing, and a new upload replaces it.
func (d *Driver) deleteNodeImage(v hypervisor.Volume) error {
	p, err := d.pool()
	if err != nil {
		return err
	}
	vol, ok, err := d.lookupVolume(p, v.Name)
	if err != nil || !ok {
		return err
	}
	sums, err := d.markers(p, v.Name)
	if err != nil {
		return err
	}
	if len(sums) == 0 {
		return fmt.Errorf("refusing to delete volume %s on %s: it has no marker of a verified upload, so labctl did not upload it", v.Name, d.opts.Name)
	}
	vols, _, err := d.l.StoragePoolListAllVolumes(p, 1, 0)
	if err != nil {
		return fmt.Errorf("listing volumes of pool %s: %w", d.opts.Pool, err)
	}
	backed, err := d.backingUsers(vols)
	if err != nil {
		return err
	}
	if by := backed[d.volPath(vol)]; by != "" {
		return fmt.Errorf("keeping node image %s on %s: %s now uses it", v.Name, d.opts.Name, by)
	}
	if err := d.deleteVolume(p, v.Name); err != nil {
		return err
	}
	for _, sum := range sums {
		if err := d.deleteVolume(p, markerPrefix(v.Name)+sum); err != nil {
			return err
		}
	}
	return nil
}
