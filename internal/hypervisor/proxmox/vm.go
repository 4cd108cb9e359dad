package proxmox

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	pve "github.com/luthermonson/go-proxmox"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
)

// vmidsInUse lists every VMID of the cluster, with its name and tags.
func (d *Driver) vmidsInUse(ctx context.Context) (map[int]resource, error) {
	res, err := d.resources(ctx, "vm")
	if err != nil {
		return nil, err
	}
	used := map[int]resource{}
	for _, r := range res {
		used[r.VMID] = r
	}
	return used, nil
}

// pickID returns a free VMID in the configured range, else /cluster/nextid.
func (d *Driver) pickID(ctx context.Context, skip map[int]bool) (int, error) {
	if r := d.cfg.VMIDRange; r != nil {
		used, err := d.vmidsInUse(ctx)
		if err != nil {
			return 0, err
		}
		for id := r.Start; id <= r.End; id++ {
			if _, taken := used[id]; !taken && !skip[id] {
				return id, nil
			}
		}
		return 0, fmt.Errorf("no free VMID in %s %d-%d: widen the range or remove VMs", field(d.name, "vmidRange"), r.Start, r.End)
	}
	var id pve.StringOrInt
	if err := d.c.Get(ctx, "/cluster/nextid", &id); err != nil {
		return 0, api(err, "asking the cluster for a free VMID")
	}
	return int(id), nil
}

func isExists(err error) bool {
	return err != nil && strings.Contains(err.Error(), "already exists")
}

// maxCreateTries bounds the VMID collision retries.
const maxCreateTries = 5

// CreateVM creates a stopped VM from spec: the disk imported from the
// cloud image, a cloud-init drive, the NoCloud seed ISO when given, agent on
// and tags labctl and the lab's. A VM that could not be finished is
// deleted again, so there is never a half-made VM.
func (d *Driver) CreateVM(ctx context.Context, spec hypervisor.VMSpec) (hypervisor.VM, error) {
	n, err := d.node(spec.Node)
	if err != nil {
		return hypervisor.VM{}, err
	}
	if spec.Image.Volume == "" {
		return hypervisor.VM{}, errors.New("creating a VM needs the cloud image's volume (call EnsureImage first)")
	}
	iso := spec.CloudInit.SeedISO
	if iso == nil && spec.CloudInit.UserData != nil && d.o.Seed != nil {
		if iso, err = d.o.Seed(spec.Name, spec.CloudInit); err != nil {
			return hypervisor.VM{}, fmt.Errorf("building the cloud-init seed ISO of %s: %w", spec.Name, err)
		}
	}
	seed := ""
	if len(iso) > 0 {
		if seed, err = d.ensureSeed(ctx, n, spec.Lab, spec.Name, iso); err != nil {
			return hypervisor.VM{}, err
		}
	}
	params := d.createParams(n, spec, seed)
	skip := map[int]bool{}
	for try := 1; ; try++ {
		id := spec.ID
		if id == 0 {
			if id, err = d.pickID(ctx, skip); err != nil {
				return hypervisor.VM{}, err
			}
		}
		params["vmid"] = id
		var upid string
		err = d.c.Post(ctx, fmt.Sprintf("/nodes/%s/qemu", n.Name), params, &upid)
		if err == nil {
			err = d.wait(ctx, upid)
			if err != nil && !isTaskError(err, "already exists") {
				// The create task may still run (ctx cancelled): remove what it makes.
				d.cleanup(n.Name, id, spec, upid)
				return hypervisor.VM{}, api(err, "creating VM %d (%s) on node %s", id, spec.Name, n.Name)
			}
		}
		if err == nil {
			break
		}
		if !isExists(err) {
			// The request may have reached PVE (a timeout, a cancel).
			d.cleanup(n.Name, id, spec, "")
			return hypervisor.VM{}, api(err, "creating VM %d (%s) on node %s", id, spec.Name, n.Name)
		}
		if spec.ID != 0 {
			return hypervisor.VM{}, fmt.Errorf("creating VM %s on node %s: VMID %d is already taken by a VM labctl did not make for this lab: set management.vmid to a free id, or leave it out to pick one from %s",
				spec.Name, n.Name, id, field(d.name, "vmidRange"))
		}
		skip[id] = true
		if try == maxCreateTries {
			return hypervisor.VM{}, fmt.Errorf("creating VM %s on node %s: %d VMIDs in a row were taken by others while creating; retry later", spec.Name, n.Name, try)
		}
	}
	id := params["vmid"].(int)
	if spec.DiskGiB > 0 {
		var upid string
		err := d.c.Put(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/resize", n.Name, id),
			map[string]any{"disk": "scsi0", "size": fmt.Sprintf("%dG", spec.DiskGiB)}, &upid)
		if err == nil {
			err = d.wait(ctx, upid)
		}
		if err != nil {
			d.cleanup(n.Name, id, spec, "")
			return hypervisor.VM{}, api(err, "growing the disk of VM %d to %d GiB (the VM was removed again)", id, spec.DiskGiB)
		}
	}
	return hypervisor.VM{Name: spec.Name, ID: id, Node: n.Name, Lab: spec.Lab, CPUs: spec.CPUs, MemoryMiB: spec.MemoryMiB,
		Tags: d.tags(spec)}, nil
}

func (d *Driver) tags(spec hypervisor.VMSpec) []string {
	return append([]string{hypervisor.Tag, hypervisor.LabTag(spec.Lab)}, spec.Tags...)
}

func (d *Driver) createParams(n config.PVENode, spec hypervisor.VMSpec, seed string) map[string]any {
	bridge := spec.Network.Bridge
	if bridge == "" {
		bridge = n.Bridge
	}
	net := "virtio,bridge=" + bridge
	if spec.Network.MAC != "" {
		// The seed's network-config matches the NIC by this MAC.
		net = "virtio=" + strings.ToUpper(spec.Network.MAC) + ",bridge=" + bridge
	}
	if spec.Network.VLAN > 0 {
		net += ",tag=" + strconv.Itoa(spec.Network.VLAN)
	}
	p := map[string]any{
		"name":        spec.Name,
		"cores":       spec.CPUs,
		"memory":      strconv.Itoa(spec.MemoryMiB),
		"ostype":      "l26",
		"scsihw":      "virtio-scsi-single",
		"scsi0":       fmt.Sprintf("%s:0,import-from=%s,discard=on,iothread=1", n.Storage, spec.Image.Volume),
		"ide2":        n.Storage + ":cloudinit",
		"boot":        "order=scsi0",
		"agent":       "enabled=1",
		"net0":        net,
		"serial0":     "socket",
		"vga":         "serial0",
		"tags":        strings.Join(d.tags(spec), ";"),
		"description": fmt.Sprintf("Made by labctl for lab %s. Remove with 'labctl mgmt down'.", spec.Lab),
		"ciupgrade":   0,
	}
	ci := spec.CloudInit
	if ci.User != "" {
		p["ciuser"] = ci.User
	}
	if len(ci.SSHKeys) > 0 {
		p["sshkeys"] = pve.EncodeSSHKeys(ci.SSHKeys...)
	}
	if ci.Address.IsValid() {
		ip := "ip=" + ci.Address.String()
		if ci.Gateway.IsValid() {
			ip += ",gw=" + ci.Gateway.String()
		}
		p["ipconfig0"] = ip
	} else {
		p["ipconfig0"] = "ip=dhcp"
	}
	if len(ci.DNSServers) > 0 {
		dns := make([]string, len(ci.DNSServers))
		for i, a := range ci.DNSServers {
			dns[i] = a.String()
		}
		p["nameserver"] = strings.Join(dns, " ")
	}
	if seed != "" {
		// The seed ISO is the NoCloud datasource (label cidata). PVE's own
		// drive then uses the config-drive format (label config-2), so the
		// two never clash; it carries the same user, keys and address.
		p["ide3"] = seed + ",media=cdrom"
		p["citype"] = "configdrive2"
	}
	return p
}

// cleanup removes a VM whose creation did not finish, with its own
// bounded context: the caller's may be cancelled already. It waits out a
// create still running and deletes only a VM with this spec's name and
// tags, so a VMID another client took is never touched.
func (d *Driver) cleanup(node string, id int, spec hypervisor.VMSpec, createUPID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if createUPID != "" {
		_ = d.wait(ctx, createUPID)
	}
	vm := hypervisor.VM{ID: id, Node: node, Name: spec.Name, Lab: spec.Lab}
	delay := d.o.Backoff
	for {
		s, err := d.status(ctx, vm)
		if err != nil {
			return // gone, or unknown: nothing labctl can safely remove
		}
		if s.Name != spec.Name || !slices.Contains(splitTags(s.Tags), hypervisor.LabTag(spec.Lab)) {
			return
		}
		if s.Lock != "create" {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(delay*2, d.o.MaxBackoff)
	}
	var upid string
	p := fmt.Sprintf("/nodes/%s/qemu/%d?purge=1&destroy-unreferenced-disks=1", node, id)
	if err := d.c.Delete(ctx, p, &upid); err == nil {
		_ = d.wait(ctx, upid)
	}
}

type vmStatus struct {
	Status string `json:"status"`
	Name   string `json:"name"`
	Tags   string `json:"tags"`
	Lock   string `json:"lock"`
}

func (d *Driver) status(ctx context.Context, vm hypervisor.VM) (vmStatus, error) {
	var s vmStatus
	err := d.c.Get(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/status/current", vm.Node, vm.ID), &s)
	return s, api(err, "reading the status of VM %d on node %s", vm.ID, vm.Node)
}

// StartVM starts the VM; a running VM is left alone.
func (d *Driver) StartVM(ctx context.Context, vm hypervisor.VM) error {
	s, err := d.status(ctx, vm)
	if err != nil || s.Status == "running" {
		return err
	}
	var upid string
	err = d.c.Post(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/status/start", vm.Node, vm.ID), map[string]any{}, &upid)
	if err == nil {
		err = d.wait(ctx, upid)
	}
	return api(err, "starting VM %d (%s) on node %s", vm.ID, vm.Name, vm.Node)
}

// DeleteVM stops and deletes a VM labctl made for its lab, with purge, its
// disks and its seed ISO. It refuses any VM without both tags.
func (d *Driver) DeleteVM(ctx context.Context, vm hypervisor.VM) error {
	s, err := d.status(ctx, vm)
	if errors.Is(err, pve.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	tags := splitTags(s.Tags)
	if vm.Lab == "" || !slices.Contains(tags, hypervisor.Tag) || !slices.Contains(tags, hypervisor.LabTag(vm.Lab)) {
		return fmt.Errorf("refusing to delete VM %d (%s) on node %s: it lacks the tags %s and %s, so labctl did not make it for lab %q",
			vm.ID, s.Name, vm.Node, hypervisor.Tag, hypervisor.LabTag(vm.Lab), vm.Lab)
	}
	var cfg map[string]any
	if err := d.c.Get(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/config", vm.Node, vm.ID), &cfg); err != nil {
		return api(err, "reading the config of VM %d", vm.ID)
	}
	if err := d.stopAndDestroy(ctx, vm, s.Status == "running"); err != nil {
		return err
	}
	// The seed ISO is labctl's (its name says so); remove it too.
	if ide3, _ := cfg["ide3"].(string); ide3 != "" {
		vol, _, _ := strings.Cut(ide3, ",")
		storage, rest, _ := strings.Cut(vol, ":")
		if strings.HasPrefix(rest, "iso/labctl-"+vm.Lab+"-") {
			if err := d.deleteContent(ctx, vm.Node, storage, vol); err != nil {
				return fmt.Errorf("removing the seed ISO of VM %d: %w", vm.ID, err)
			}
		}
	}
	return nil
}

// stopAndDestroy powers a running VM off (a hard stop: its disks go
// next), then deletes it with its disks, waiting for each task. A VM
// already gone is not an error.
func (d *Driver) stopAndDestroy(ctx context.Context, vm hypervisor.VM, running bool) error {
	if running {
		var upid string
		err := d.c.Post(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/status/stop", vm.Node, vm.ID), map[string]any{}, &upid)
		if err == nil {
			err = d.wait(ctx, upid)
		}
		if err != nil {
			return api(err, "stopping VM %d (%s) on node %s", vm.ID, vm.Name, vm.Node)
		}
	}
	return d.destroy(ctx, vm)
}

// destroy deletes a stopped VM with its disks and waits for the task.
func (d *Driver) destroy(ctx context.Context, vm hypervisor.VM) error {
	var upid string
	err := d.c.Delete(ctx, fmt.Sprintf("/nodes/%s/qemu/%d?purge=1&destroy-unreferenced-disks=1", vm.Node, vm.ID), &upid)
	if err == nil {
		err = d.wait(ctx, upid)
	}
	if err != nil && !errors.Is(err, pve.ErrNotFound) {
		return api(err, "deleting VM %d (%s) on node %s", vm.ID, vm.Name, vm.Node)
	}
	return nil
}

// deleteContent removes volume volid of a node's storage and waits for
// the task, if the storage runs one. One already gone is not an error.
func (d *Driver) deleteContent(ctx context.Context, node, storage, volid string) error {
	var upid string
	err := d.c.Delete(ctx, fmt.Sprintf("/nodes/%s/storage/%s/content/%s", node, storage, url.PathEscape(volid)), &upid)
	if err == nil && upid != "" {
		err = d.wait(ctx, upid)
	}
	if err != nil && !errors.Is(err, pve.ErrNotFound) {
		return api(err, "deleting %s on node %s", volid, node)
	}
	return nil
}
