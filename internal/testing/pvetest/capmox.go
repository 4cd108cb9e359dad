package pvetest

// The endpoints the real CAPMOX (github.com/ionos-cloud/cluster-api-provider-proxmox
// v0.9.0, through github.com/luthermonson/go-proxmox v0.6.0) needs to make a
// machine: clone a template, configure it asynchronously, list the node's
// containers for its memory scheduler, and ask the guest agent. The
// parameters are checked against apidoc.json before any handler runs
// (Server.handle); the rules below are PVE's, named where they come from.

import (
	"crypto/rand"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

func init() {
	routes["POST /nodes/{node}/qemu/{vmid}/clone"] = cloneVM
	routes["POST /nodes/{node}/qemu/{vmid}/config"] = setVMConfigAsync
	routes["GET /nodes/{node}/lxc"] = listContainers
	routes["GET /cluster/status"] = clusterStatus
	routes["GET /nodes/{node}/qemu/{vmid}/agent/get-osinfo"] = agentOSInfo
}

// AddTemplate adds a VM template as image-builder's Packer build leaves it
// (a boot disk on local-lvm, a NIC on the node's first bridge, a cloud-init
// drive, the guest agent on), with tags for CAPMOX's templateSelector.
func (s *Server) AddTemplate(node string, id int, name string, tags ...string) *VM {
	v := s.AddVM(node, id, name, 2048, false, true, tags...)
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[node]
	disk := fmt.Sprintf("local-lvm:base-%d-disk-0", id)
	n.Storages["local-lvm"].Volumes[disk] = &Volume{VolID: disk, Content: "images", Format: "raw", Size: 3 << 30, VMID: id}
	bridge := "vmbr0"
	if len(n.Bridges) > 0 {
		bridge = n.Bridges[0]
	}
	for k, x := range map[string]string{
		"scsi0":   disk + ",size=3G",
		"scsihw":  "virtio-scsi-pci",
		"boot":    "order=scsi0",
		"ide2":    fmt.Sprintf("local-lvm:vm-%d-cloudinit,media=cdrom", id),
		"net0":    "virtio=" + randomMAC() + ",bridge=" + bridge,
		"agent":   "1",
		"sockets": "1",
		"cores":   "2",
		"ostype":  "l26",
		"smbios1": "uuid=" + randomUUID(),
	} {
		v.Config[k] = x
	}
	return v
}

// cloneVM copies a VM as qemu-server's PVE/API2/Qemu.pm clone_vm does:
// full defaults to true for a VM and false for a template, and a linked
// clone needs a template (its base disks); storage only with a full
// clone; every netN gets a new MAC ("always change MAC! address"), smbios1
// a new uuid; template, snapshots and unused disks are not copied; the new
// name is the parameter's or "Copy-of-VM-<name>". The task's UPID names
// the source VMID (../shared/LAB.md).
func cloneVM(c *call) (any, error) {
	n, src, err := c.vm()
	if err != nil {
		return nil, err
	}
	newID := c.int("newid")
	if _, used := c.s.vms[newID]; used {
		return nil, fail(500, "unable to create VM %d: config file already exists", newID)
	}
	// full defaults to "not a template": a VM is always copied whole.
	full := src.Config["template"] != "1"
	if _, set := c.p["full"]; set {
		full = c.bool("full")
	}
	if !full && src.Config["template"] != "1" {
		return nil, fail(500, "linked clone feature is only available for templates")
	}
	if c.p["storage"] != "" && !full {
		return nil, fail(400, "parameter 'storage' not allowed for linked clones")
	}
	if src.Lock != "" {
		return nil, fail(500, "VM is locked (%s)", src.Lock)
	}
	target := n
	if t := c.p["target"]; t != "" {
		tn, ok := c.s.nodes[t]
		if !ok {
			return nil, fail(500, "no such cluster node '%s'", t)
		}
		// Disks on node-local storage cannot follow to another node
		// (clone_vm: "Can't clone to non-shared storage on another node").
		if tn.Name != n.Name {
			return nil, fail(500, "can't clone VM to node '%s' (VM uses local storage)", tn.Name)
		}
		target = tn
	}
	storage := c.p["storage"]
	cfg := map[string]string{}
	var volumes []*Volume
	keys := make([]string, 0, len(src.Config))
	for k := range src.Config {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	disks := 0
	for _, k := range keys {
		v := src.Config[k]
		switch {
		case k == "template" || strings.HasPrefix(k, "unused") || k == "parent" || k == "snaptime" || k == "vmstate":
			continue
		case strings.HasPrefix(k, "net"):
			cfg[k] = withMAC(v, randomMAC())
		case diskKey.MatchString(k):
			file, opts, _ := strings.Cut(v, ",")
			if strings.Contains(opts, "media=cdrom") {
				if strings.HasSuffix(file, "-cloudinit") {
					stName, _, _ := strings.Cut(file, ":")
					volid := fmt.Sprintf("%s:vm-%d-cloudinit", stName, newID)
					cfg[k] = volid + ",media=cdrom"
					volumes = append(volumes, &Volume{VolID: volid, Content: "images", Format: "raw", Size: 4 << 20, VMID: newID})
					continue
				}
				cfg[k] = v
				continue
			}
			stName, _, _ := strings.Cut(file, ":")
			if full && storage != "" {
				stName = storage
			}
			st := target.Storages[stName]
			if st == nil {
				return nil, fail(500, "storage '%s' does not exist", stName)
			}
			if !contains(st.Content, "images") {
				return nil, fail(500, "storage '%s' does not support vm images", stName)
			}
			volid := fmt.Sprintf("%s:vm-%d-disk-%d", stName, newID, disks)
			disks++
			cfg[k] = volid
			if opts != "" {
				cfg[k] += "," + opts
			}
			volumes = append(volumes, &Volume{VolID: volid, Content: "images", Format: "raw", Size: 3 << 30, VMID: newID})
		default:
			cfg[k] = v
		}
	}
	cfg["smbios1"] = "uuid=" + randomUUID()
	cfg["name"] = c.p["name"]
	if cfg["name"] == "" {
		cfg["name"] = "Copy-of-VM-" + src.Name()
	}
	if d := c.p["description"]; d != "" {
		cfg["description"] = d
	}
	v := &VM{ID: newID, Node: target.Name, Config: cfg, Lock: "clone", Files: map[string][]byte{}}
	c.s.vms[newID] = v
	src.Lock = "clone"
	upid := c.startTask(n.Name, "qmclone", strconv.Itoa(src.ID), nil, func() error {
		src.Lock = ""
		for _, vol := range volumes {
			stName, _, _ := strings.Cut(vol.VolID, ":")
			target.Storages[stName].Volumes[vol.VolID] = vol
		}
		v.Lock = ""
		return nil
	})
	if c.taskExit != "" {
		src.Lock = ""
		delete(c.s.vms, newID)
	}
	return upid, nil
}

// setVMConfigAsync is POST .../config: the same update as PUT, run as a
// task (qemu-server's update_vm_api with the background worker).
func setVMConfigAsync(c *call) (any, error) {
	n, v, err := c.vm()
	if err != nil {
		return nil, err
	}
	if err := c.updateConfig(v); err != nil {
		return nil, err
	}
	return c.startTask(n.Name, "qmconfig", c.p["vmid"], nil, nil), nil
}

// updateConfig applies the options of a config update that pvetest knows.
// A netN without a MAC gets one, as qemu-server's parse_net does unless
// told not to; a cdrom must name an existing volume; cores, sockets and
// memory are plain numbers (the schema checks their ranges).
func (c *call) updateConfig(v *VM) error {
	if d := c.p["digest"]; d != "" && d != DigestOf(v.Config) {
		return fail(500, "detected modified configuration - file changed by other user? Try again.")
	}
	if v.Lock != "" {
		return fail(500, "VM is locked (%s)", v.Lock)
	}
	n := c.s.nodes[v.Node]
	set := map[string]string{}
	for k, x := range c.p {
		switch {
		case k == "node" || k == "vmid" || k == "digest":
		case k == "tags" || k == "description" || k == "name" || k == "cores" || k == "sockets" || k == "memory" || k == "boot":
			set[k] = x
		case strings.HasPrefix(k, "net") && isIndex(k[3:]):
			model, _, _ := strings.Cut(x, ",")
			if _, mac, ok := strings.Cut(model, "="); !ok || mac == "" {
				x = withMAC(x, randomMAC())
			}
			set[k] = x
		case diskKey.MatchString(k) && strings.Contains(x, "media=cdrom"):
			file, _, _ := strings.Cut(x, ",")
			if file != "none" && file != "cdrom" && c.s.findVolume(n, file) == nil {
				return fail(500, "%s: volume '%s' does not exist", k, file)
			}
			set[k] = x
		default:
			return fail(501, "pvetest: setting %q is valid but not implemented here", k)
		}
	}
	// The boot order may name only devices the VM has once the update is
	// applied (qemu-server's update_vm_api checks the new "boot" against
	// the new config: "invalid bootorder: device '...' does not exist").
	if b, ok := set["boot"]; ok {
		for _, dev := range strings.Split(optValue(b, "order"), ";") {
			if dev == "" {
				continue
			}
			if _, ok := set[dev]; !ok && v.Config[dev] == "" {
				return fail(400, "invalid bootorder: device '%s' does not exist'", dev)
			}
		}
	}
	for k, x := range set {
		v.Config[k] = x
	}
	return nil
}

func isIndex(s string) bool {
	_, err := strconv.Atoi(s)
	return s != "" && err == nil
}

// withMAC sets the MAC of a netN value "model[=mac],opts...".
func withMAC(net, mac string) string {
	model, opts, _ := strings.Cut(net, ",")
	model, _, _ = strings.Cut(model, "=")
	out := model + "=" + mac
	if opts != "" {
		out += "," + opts
	}
	return out
}

// randomMAC is a locally administered unicast MAC with Proxmox's default
// prefix BC:24:11 (PVE::Tools::random_ether_addr with datacenter.cfg's
// mac_prefix default).
func randomMAC() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return fmt.Sprintf("BC:24:11:%02X:%02X:%02X", b[0], b[1], b[2])
}

func randomUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// listContainers: the fake runs no LXC containers.
func listContainers(c *call) (any, error) {
	if _, err := c.node(); err != nil {
		return nil, err
	}
	return []map[string]any{}, nil
}

// agentOSInfo answers as the guest agent of an Ubuntu 24.04 guest would,
// or with the errors of c.agent.
func agentOSInfo(c *call) (any, error) {
	if _, err := c.agent(); err != nil {
		return nil, err
	}
	return map[string]any{"result": map[string]any{"id": "ubuntu", "name": "Ubuntu", "version-id": "24.04",
		"pretty-name": "Ubuntu 24.04 LTS", "kernel-release": "6.8.0-31-generic", "machine": "x86_64"}}, nil
}

// clusterStatus lists the nodes, as PVE/API2/Cluster.pm's status does:
// a "cluster" entry only when the nodes form a corosync cluster (here:
// more than one node), then one "node" entry each, the first answering
// (local). Fields as apidoc.json's returns schema names them.
func clusterStatus(c *call) (any, error) {
	names := make([]string, 0, len(c.s.nodes))
	for n := range c.s.nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	out := []map[string]any{}
	if len(names) > 1 {
		out = append(out, map[string]any{"type": "cluster", "id": "cluster", "name": "pvetest", "nodes": len(names), "quorate": 1, "version": len(names)})
	}
	host, _, _ := strings.Cut(strings.TrimPrefix(c.s.URL, "https://"), ":")
	for i, n := range names {
		local := 0
		if i == 0 {
			local = 1
		}
		out = append(out, map[string]any{"type": "node", "id": "node/" + n, "name": n, "nodeid": i + 1, "online": 1, "local": local, "ip": host, "level": ""})
	}
	return out, nil
}
