package proxmox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	pve "github.com/luthermonson/go-proxmox"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/common"
	"github.com/labctl/labctl/internal/redact"
)

// Driver is hypervisor.Driver for one Proxmox VE endpoint of lab.yaml.
type Driver struct {
	name string
	cfg  *config.Proxmox
	c    *pve.Client
	hc   *http.Client
	o    Options
	// auth is the Authorization header value; used only for uploads,
	// which go-proxmox sends without a context.
	auth string
}

var _ hypervisor.Driver = (*Driver)(nil)

// New connects nothing yet: it resolves the token secret and TLS settings
// of hypervisor h, which must be a Proxmox one.
func New(h config.Hypervisor, o Options) (*Driver, error) {
	if h.Proxmox == nil {
		return nil, fmt.Errorf("hypervisors[%s]: not a Proxmox hypervisor", h.Name)
	}
	o.defaults()
	secret, err := h.ReadTokenSecret()
	if err != nil {
		return nil, err
	}
	c, hc, err := newClient(h.Name, h.Proxmox, secret, o)
	if err != nil {
		return nil, err
	}
	return &Driver{name: h.Name, cfg: h.Proxmox, c: c, hc: hc, o: o,
		auth: "PVEAPIToken=" + h.Proxmox.TokenID + "=" + secret}, nil
}

// Name is the hypervisor's name in lab.yaml.
func (d *Driver) Name() string { return d.name }

func (d *Driver) node(name string) (config.PVENode, error) {
	for _, n := range d.cfg.Nodes {
		if n.Name == name {
			return n, nil
		}
	}
	return config.PVENode{}, fmt.Errorf("node %q is not listed in %s: add it there", name, field(d.name, "nodes"))
}

// api wraps a go-proxmox call's error with what was being done.
func api(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), err)
}

// ---- images ----

type content struct {
	VolID   string `json:"volid"`
	Content string `json:"content"`
	Size    int64  `json:"size"`
}

func (d *Driver) contents(ctx context.Context, node, storage, kind string) ([]content, error) {
	var out []content
	err := d.c.Get(ctx, fmt.Sprintf("/nodes/%s/storage/%s/content?content=%s", node, storage, kind), &out)
	return out, api(err, "listing %s content of storage %s on node %s", kind, storage, node)
}

// ImageFileName is the import file name of a cloud image: its URL's base
// name with a .qcow2 extension (PVE imports only known extensions), and
// the checksum's first 12 hex digits, so a new pin is a new file and a
// file that is there was verified against this checksum.
func ImageFileName(spec hypervisor.ImageSpec, sha string) string {
	name := spec.FileName
	if name == "" {
		name = path.Base(spec.URL)
	}
	name = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, ".qcow2"), ".img"), ".raw")
	if len(sha) >= 12 {
		name += "-" + sha[:12]
	}
	return name + ".qcow2"
}

// FindImage returns the image EnsureImage would place, or
// hypervisor.ErrNotFound. It only reads (dry runs and plans call it).
func (d *Driver) FindImage(ctx context.Context, spec hypervisor.ImageSpec) (hypervisor.Image, error) {
	n, err := d.node(spec.Node)
	if err != nil {
		return hypervisor.Image{}, err
	}
	sha, err := d.checksum(ctx, spec)
	if err != nil {
		return hypervisor.Image{}, err
	}
	img := hypervisor.Image{Node: n.Name, Volume: n.ImageStorage + ":import/" + ImageFileName(spec, sha)}
	have, err := d.hasVolume(ctx, n.Name, n.ImageStorage, "import", img.Volume)
	if err == nil && !have {
		err = fmt.Errorf("image %s on node %s: %w", img.Volume, n.Name, hypervisor.ErrNotFound)
	}
	return img, err
}

// EnsureImage downloads the cloud image onto the node's image storage with
// download-url (content import), verified by PVE against its sha256, and
// does nothing when the file is already there.
func (d *Driver) EnsureImage(ctx context.Context, spec hypervisor.ImageSpec) (hypervisor.Image, error) {
	n, err := d.node(spec.Node)
	if err != nil {
		return hypervisor.Image{}, err
	}
	sha, err := d.checksum(ctx, spec)
	if err != nil {
		return hypervisor.Image{}, err
	}
	file := ImageFileName(spec, sha)
	img := hypervisor.Image{Node: n.Name, Volume: n.ImageStorage + ":import/" + file}
	have, err := d.hasVolume(ctx, n.Name, n.ImageStorage, "import", img.Volume)
	if err != nil || have {
		return img, err
	}
	// An interrupted run may have left its download running: wait for it
	// rather than fetch the image twice.
	upid, err := d.activeTask(ctx, n.Name, "download", file)
	if err != nil {
		return img, err
	}
	if upid == "" {
		err = d.c.Post(ctx, fmt.Sprintf("/nodes/%s/storage/%s/download-url", n.Name, n.ImageStorage), map[string]any{
			"content": "import", "filename": file, "url": spec.URL,
			"checksum": sha, "checksum-algorithm": "sha256", "verify-certificates": 1,
		}, &upid)
	}
	if err == nil {
		err = d.wait(ctx, upid)
	}
	if err != nil && strings.Contains(err.Error(), "refusing to override existing file") {
		// Another download of this very file finished first.
		if have, herr := d.hasVolume(ctx, n.Name, n.ImageStorage, "import", img.Volume); herr == nil && have {
			return img, nil
		}
	}
	return img, api(err, "downloading %s to %s on node %s", redact.URL(spec.URL), img.Volume, n.Name)
}

// activeTask returns the UPID of a running task of type typ and id on node, or "".
func (d *Driver) activeTask(ctx context.Context, node, typ, id string) (string, error) {
	var list []struct {
		UPID string `json:"upid"`
		ID   string `json:"id"`
		Type string `json:"type"`
	}
	if err := d.c.Get(ctx, fmt.Sprintf("/nodes/%s/tasks?source=active&typefilter=%s", node, typ), &list); err != nil {
		return "", api(err, "listing the running %s tasks of node %s", typ, node)
	}
	for _, t := range list {
		if t.Type == typ && t.ID == id {
			return t.UPID, nil
		}
	}
	return "", nil
}

func (d *Driver) hasVolume(ctx context.Context, node, storage, kind, volid string) (bool, error) {
	list, err := d.contents(ctx, node, storage, kind)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(list, func(c content) bool { return c.VolID == volid }), nil
}

// checksum is the image's sha256 in hex (common.Checksum, the rule both
// drivers share).
func (d *Driver) checksum(ctx context.Context, spec hypervisor.ImageSpec) (string, error) {
	return common.Checksum(ctx, d.sumsClient(), spec)
}

// SumsClient fetches checksum files; tests replace it.
var SumsClient = &http.Client{Timeout: 30 * time.Second}

func (d *Driver) sumsClient() *http.Client { return SumsClient }

// ---- VMs ----

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

// seedName is the NoCloud ISO's file name: lab, VM and content hash, so a
// re-run with the same data uploads nothing.
func seedName(lab, name string, iso []byte) string {
	sum := sha256.Sum256(iso)
	return fmt.Sprintf("labctl-%s-%s-%s.iso", lab, name, hex.EncodeToString(sum[:6]))
}

// ensureSeed uploads the NoCloud seed ISO as content iso, unless it is there.
func (d *Driver) ensureSeed(ctx context.Context, n config.PVENode, lab, name string, iso []byte) (string, error) {
	file := seedName(lab, name, iso)
	volid := n.ImageStorage + ":iso/" + file
	have, err := d.hasVolume(ctx, n.Name, n.ImageStorage, "iso", volid)
	if err != nil || have {
		return volid, err
	}
	upid, err := d.upload(ctx, n.Name, n.ImageStorage, "iso", file, iso)
	if err == nil {
		err = d.wait(ctx, upid)
	}
	if err != nil && strings.Contains(err.Error(), "refusing to override") {
		// An interrupted run's upload of the same bytes (same name) landed.
		if have, herr := d.hasVolume(ctx, n.Name, n.ImageStorage, "iso", volid); herr == nil && have {
			return volid, nil
		}
	}
	return volid, api(err, "uploading the cloud-init seed %s to node %s", volid, n.Name)
}

// upload posts a file to the storage upload endpoint. go-proxmox's
// UploadReader takes no context, so the multipart request is built here.
func (d *Driver) upload(ctx context.Context, node, storage, kind, file string, data []byte) (string, error) {
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	sum := sha256.Sum256(data)
	// pveproxy wants these fields before the file part.
	for _, kv := range [][2]string{{"content", kind}, {"checksum-algorithm", "sha256"}, {"checksum", hex.EncodeToString(sum[:])}} {
		if err := w.WriteField(kv[0], kv[1]); err != nil {
			return "", err
		}
	}
	fw, err := w.CreateFormFile("filename", file)
	if err != nil {
		return "", err
	}
	if _, err := fw.Write(data); err != nil {
		return "", err
	}
	if err := w.Close(); err != nil {
		return "", err
	}
	u := strings.TrimSuffix(d.cfg.URL, "/") + fmt.Sprintf("/api2/json/nodes/%s/storage/%s/upload", node, storage)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, &b)
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", w.FormDataContentType())
	req.Header.Set("Authorization", d.auth)
	req.Header.Set("Accept", "application/json")
	res, err := d.hc.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	var out struct {
		Data    string `json:"data"`
		Message string `json:"message"`
	}
	if err := decodeJSON(res.Body, &out); err != nil || res.StatusCode/100 != 2 {
		return "", fmt.Errorf("%s %s", res.Status, strings.TrimSpace(out.Message))
	}
	return out.Data, nil
}

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

type agentIface struct {
	Name      string `json:"name"`
	Addresses []struct {
		IP   string `json:"ip-address"`
		Type string `json:"ip-address-type"`
	} `json:"ip-addresses"`
}

// agentDown matches the answers of a VM whose guest agent is not up yet.
func agentDown(err error) bool {
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "guest agent is not running") || strings.Contains(s, "got timeout")
}

// WaitAddress polls the guest agent, backing off, until a NIC other than
// lo reports an IPv4 address that is not link-local.
func (d *Driver) WaitAddress(ctx context.Context, vm hypervisor.VM) (netip.Addr, error) {
	delay := d.o.Backoff
	for {
		var out struct {
			Result []agentIface `json:"result"`
		}
		err := d.c.Get(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/agent/network-get-interfaces", vm.Node, vm.ID), &out)
		switch {
		case err == nil:
			if a, ok := firstIPv4(out.Result); ok {
				return a, nil
			}
		case ctx.Err() != nil:
			return netip.Addr{}, fmt.Errorf("waiting for VM %d (%s) to report its address: %w", vm.ID, vm.Name, ctx.Err())
		case !agentDown(err):
			return netip.Addr{}, api(err, "asking the guest agent of VM %d (%s) for its address", vm.ID, vm.Name)
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return netip.Addr{}, fmt.Errorf("waiting for VM %d (%s) to report its address through the guest agent (is qemu-guest-agent installed by cloud-init?): %w", vm.ID, vm.Name, ctx.Err())
		case <-timer.C:
		}
		delay = min(delay*2, d.o.MaxBackoff)
	}
}

func firstIPv4(ifaces []agentIface) (netip.Addr, bool) {
	for _, i := range ifaces {
		if i.Name == "lo" {
			continue
		}
		for _, a := range i.Addresses {
			ip, err := netip.ParseAddr(a.IP)
			if err == nil && ip.Is4() && !ip.IsLinkLocalUnicast() && !ip.IsUnspecified() {
				return ip, true
			}
		}
	}
	return netip.Addr{}, false
}

// ReadFile reads a file in the guest through the guest agent's file-read.
func (d *Driver) ReadFile(ctx context.Context, vm hypervisor.VM, file string) ([]byte, error) {
	var out struct {
		Content   string        `json:"content"`
		Truncated pve.IntOrBool `json:"truncated"`
	}
	err := d.c.Get(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/agent/file-read?file=%s", vm.Node, vm.ID, url.QueryEscape(file)), &out)
	if err != nil && strings.Contains(err.Error(), "No such file or directory") {
		return nil, fmt.Errorf("reading %s in VM %d (%s): %w", file, vm.ID, vm.Name, hypervisor.ErrNotFound)
	}
	if err != nil {
		return nil, api(err, "reading %s in VM %d (%s) through the guest agent", file, vm.ID, vm.Name)
	}
	if out.Truncated {
		return nil, fmt.Errorf("reading %s in VM %d: the guest agent truncated it (over 16 MiB)", file, vm.ID)
	}
	return []byte(out.Content), nil
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
	if s.Status == "running" {
		var upid string
		err := d.c.Post(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/status/stop", vm.Node, vm.ID), map[string]any{}, &upid)
		if err == nil {
			err = d.wait(ctx, upid)
		}
		if err != nil {
			return api(err, "stopping VM %d (%s) on node %s", vm.ID, vm.Name, vm.Node)
		}
	}
	var upid string
	err = d.c.Delete(ctx, fmt.Sprintf("/nodes/%s/qemu/%d?purge=1&destroy-unreferenced-disks=1", vm.Node, vm.ID), &upid)
	if err == nil {
		err = d.wait(ctx, upid)
	}
	if err != nil && !errors.Is(err, pve.ErrNotFound) {
		return api(err, "deleting VM %d (%s) on node %s", vm.ID, vm.Name, vm.Node)
	}
	// The seed ISO is labctl's (its name says so); remove it too.
	if ide3, _ := cfg["ide3"].(string); ide3 != "" {
		vol, _, _ := strings.Cut(ide3, ",")
		storage, rest, _ := strings.Cut(vol, ":")
		if strings.HasPrefix(rest, "iso/labctl-"+vm.Lab+"-") {
			var upid string
			err := d.c.Delete(ctx, fmt.Sprintf("/nodes/%s/storage/%s/content/%s", vm.Node, storage, url.PathEscape(vol)), &upid)
			if err == nil && upid != "" {
				err = d.wait(ctx, upid)
			}
			if err != nil && !errors.Is(err, pve.ErrNotFound) {
				return api(err, "removing the seed ISO %s of VM %d", vol, vm.ID)
			}
		}
	}
	return nil
}

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
