package proxmox

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/labctl/labctl/internal/hypervisor"
)

// The read-only calls below serve labctl doctor.

// Version asks the API for its version: it proves the API answers, TLS
// holds and the token is valid.
func (d *Driver) Version(ctx context.Context) (string, error) {
	var v struct {
		Version string `json:"version"`
		Release string `json:"release"`
	}
	err := d.c.Get(ctx, "/version", &v)
	return v.Version, api(err, "asking %s for its version", d.cfg.URL)
}

// Permissions returns the token's effective privileges: path → privilege
// → whether it propagates to paths below.
func (d *Driver) Permissions(ctx context.Context) (map[string]map[string]bool, error) {
	var raw map[string]map[string]int
	if err := d.c.Get(ctx, "/access/permissions", &raw); err != nil {
		return nil, api(err, "reading the token's permissions")
	}
	out := map[string]map[string]bool{}
	for p, privs := range raw {
		out[p] = map[string]bool{}
		for k, v := range privs {
			out[p][k] = v == 1
		}
	}
	return out, nil
}

// HasPrivilege reports whether perms grant priv on path, directly or
// propagated from a parent path.
func HasPrivilege(perms map[string]map[string]bool, path, priv string) bool {
	for p := path; ; {
		if prop, ok := perms[p][priv]; ok && (p == path || prop) {
			return true
		}
		if p == "/" {
			return false
		}
		i := strings.LastIndex(p, "/")
		if i <= 0 {
			p = "/"
		} else {
			p = p[:i]
		}
	}
}

// Storage is one storage a node sees, with its PVE storage type (dir,
// lvmthin, zfspool, ...) and content types.
type Storage struct {
	Name    string
	Type    string
	Content []string
	Active  bool
}

// DiskFormat is the disk format a VM disk on s must have: raw on block
// storages (LVM, LVM-thin, ZFS, Ceph RBD, iSCSI), whose PVE plugins
// allocate raw volumes only; qcow2 on file storages (dir, NFS, CIFS,
// GlusterFS), which keep it sparse and snapshot-capable. image-builder's
// Proxmox template defaults disk_format to qcow2, and its Proxmox docs
// (docs/book/src/capi/providers/proxmox.md, v0.1.46) say block storage
// needs raw.
func (s Storage) DiskFormat() string {
	switch s.Type {
	case "dir", "nfs", "cifs", "glusterfs":
		return "qcow2"
	}
	return "raw"
}

// Storages lists the storages of a node.
func (d *Driver) Storages(ctx context.Context, node string) ([]Storage, error) {
	var raw []struct {
		Storage string `json:"storage"`
		Type    string `json:"type"`
		Content string `json:"content"`
		Active  int    `json:"active"`
	}
	if err := d.c.Get(ctx, fmt.Sprintf("/nodes/%s/storage", node), &raw); err != nil {
		return nil, api(err, "listing the storages of node %s", node)
	}
	out := make([]Storage, 0, len(raw))
	for _, s := range raw {
		out = append(out, Storage{Name: s.Storage, Type: s.Type, Content: strings.Split(s.Content, ","), Active: s.Active == 1})
	}
	return out, nil
}

// Bridges lists the bridges of a node.
func (d *Driver) Bridges(ctx context.Context, node string) ([]string, error) {
	var raw []struct {
		Iface string `json:"iface"`
	}
	if err := d.c.Get(ctx, fmt.Sprintf("/nodes/%s/network?type=any_bridge", node), &raw); err != nil {
		return nil, api(err, "listing the bridges of node %s", node)
	}
	out := make([]string, 0, len(raw))
	for _, r := range raw {
		out = append(out, r.Iface)
	}
	sort.Strings(out)
	return out, nil
}

// Inventory is every node and every VM of the cluster, labctl's or not,
// templates included, from one request.
func (d *Driver) Inventory(ctx context.Context) ([]hypervisor.NodeCapacity, []hypervisor.VM, error) {
	res, err := d.resources(ctx, "")
	if err != nil {
		return nil, nil, err
	}
	var vms []hypervisor.VM
	for _, r := range res {
		if r.Type == "qemu" {
			vms = append(vms, r.vm())
		}
	}
	return capacity(res), vms, nil
}
