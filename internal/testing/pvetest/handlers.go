package pvetest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// call is one validated request; handlers run with s.mu held.
type call struct {
	s        *Server
	p        map[string]string
	file     *upload
	user     string
	taskExit string
}

func (c *call) int(name string) int { n, _ := strconv.Atoi(c.p[name]); return n }

func (c *call) bool(name string) bool {
	switch strings.ToLower(c.p[name]) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

var routes = map[string]func(*call) (any, error){
	"GET /version":                                               getVersion,
	"GET /nodes":                                                 getNodes,
	"GET /nodes/{node}/status":                                   getNodeStatus,
	"GET /nodes/{node}/network":                                  getNetwork,
	"GET /nodes/{node}/storage":                                  getStorages,
	"GET /nodes/{node}/storage/{storage}/content":                getContent,
	"DELETE /nodes/{node}/storage/{storage}/content/{volume}":    deleteContent,
	"GET /nodes/{node}/storage/{storage}/content/{volume}":       volumeInfo,
	"POST /nodes/{node}/storage/{storage}/download-url":          downloadURL,
	"POST /nodes/{node}/storage/{storage}/upload":                uploadFile,
	"GET /nodes/{node}/tasks":                                    listTasks,
	"GET /nodes/{node}/tasks/{upid}/status":                      taskStatus,
	"GET /nodes/{node}/tasks/{upid}/log":                         taskLog,
	"GET /cluster/nextid":                                        nextID,
	"GET /cluster/resources":                                     resources,
	"GET /access/permissions":                                    permissions,
	"GET /nodes/{node}/qemu":                                     listVMs,
	"POST /nodes/{node}/qemu":                                    createVM,
	"GET /nodes/{node}/qemu/{vmid}/config":                       vmConfig,
	"PUT /nodes/{node}/qemu/{vmid}/config":                       setVMConfig,
	"GET /nodes/{node}/qemu/{vmid}/status/current":               vmStatus,
	"POST /nodes/{node}/qemu/{vmid}/status/start":                startVM,
	"POST /nodes/{node}/qemu/{vmid}/status/stop":                 stopVM,
	"PUT /nodes/{node}/qemu/{vmid}/resize":                       resizeVM,
	"DELETE /nodes/{node}/qemu/{vmid}":                           deleteVM,
	"GET /nodes/{node}/qemu/{vmid}/agent/network-get-interfaces": agentIfaces,
	"GET /nodes/{node}/qemu/{vmid}/agent/file-read":              agentFileRead,
	"POST /nodes/{node}/qemu/{vmid}/template":                    convertToTemplate,
}

func getVersion(*call) (any, error) {
	return map[string]any{"version": "9.1.4", "release": "9.1", "repoid": "pvetest"}, nil
}

func (c *call) node() (*Node, error) {
	n, ok := c.s.nodes[c.p["node"]]
	if !ok {
		return nil, fail(595, "no such cluster node '%s'", c.p["node"])
	}
	return n, nil
}

func (c *call) storage() (*Node, *Storage, error) {
	n, err := c.node()
	if err != nil {
		return nil, nil, err
	}
	st, ok := n.Storages[c.p["storage"]]
	if !ok {
		return nil, nil, fail(500, "storage '%s' does not exist", c.p["storage"])
	}
	return n, st, nil
}

func (c *call) vm() (*Node, *VM, error) {
	n, err := c.node()
	if err != nil {
		return nil, nil, err
	}
	v, ok := c.s.vms[c.int("vmid")]
	if !ok || v.Node != n.Name {
		return nil, nil, fail(500, "Configuration file 'nodes/%s/qemu-server/%s.conf' does not exist", n.Name, c.p["vmid"])
	}
	return n, v, nil
}

func mib(n int) int64 { return int64(n) << 20 }

func (s *Server) reserved(node string) (cfg int64, used int64) {
	for _, v := range s.vms {
		if v.Node != node {
			continue
		}
		m, _ := strconv.Atoi(v.Config["memory"])
		cfg += mib(m)
		if v.Running {
			used += mib(m)
		}
	}
	return
}

func getNodes(c *call) (any, error) {
	var out []map[string]any
	for _, n := range c.s.nodes {
		_, used := c.s.reserved(n.Name)
		out = append(out, map[string]any{"node": n.Name, "status": "online", "type": "node",
			"maxmem": mib(n.MemoryMiB), "mem": used, "maxcpu": n.CPUs, "cpu": 0.02})
	}
	sort.Slice(out, func(i, j int) bool { return out[i]["node"].(string) < out[j]["node"].(string) })
	return out, nil
}

func getNodeStatus(c *call) (any, error) {
	n, err := c.node()
	if err != nil {
		return nil, err
	}
	_, used := c.s.reserved(n.Name)
	return map[string]any{
		"memory":  map[string]any{"total": mib(n.MemoryMiB), "used": used, "free": mib(n.MemoryMiB) - used},
		"cpuinfo": map[string]any{"cpus": n.CPUs, "cores": n.CPUs, "sockets": 1},
		"uptime":  3600, "pveversion": "pve-manager/9.1.4",
	}, nil
}

func getNetwork(c *call) (any, error) {
	n, err := c.node()
	if err != nil {
		return nil, err
	}
	out := []map[string]any{{"iface": "eno1", "type": "eth", "active": 1}}
	for _, b := range n.Bridges {
		out = append(out, map[string]any{"iface": b, "type": "bridge", "active": 1, "bridge_vlan_aware": 1})
	}
	if t := c.p["type"]; t != "" {
		kept := out[:0]
		for _, i := range out {
			if i["type"] == t || (t == "any_bridge" && i["type"] == "bridge") {
				kept = append(kept, i)
			}
		}
		out = kept
	}
	return out, nil
}

func getStorages(c *call) (any, error) {
	n, err := c.node()
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	for _, st := range n.Storages {
		if f := c.p["content"]; f != "" && !contains(st.Content, f) {
			continue
		}
		out = append(out, map[string]any{"storage": st.Name, "type": st.Type, "content": strings.Join(st.Content, ","),
			"active": 1, "enabled": 1, "shared": 0, "total": int64(100 << 30), "avail": int64(80 << 30), "used": int64(20 << 30)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i]["storage"].(string) < out[j]["storage"].(string) })
	return out, nil
}

func getContent(c *call) (any, error) {
	_, st, err := c.storage()
	if err != nil {
		return nil, err
	}
	out := []map[string]any{}
	for _, v := range st.Volumes {
		if f := c.p["content"]; f != "" && v.Content != f {
			continue
		}
		e := map[string]any{"volid": v.VolID, "content": v.Content, "format": v.Format, "size": v.Size, "ctime": 1767225600}
		if v.VMID != 0 {
			e["vmid"] = v.VMID
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i]["volid"].(string) < out[j]["volid"].(string) })
	return out, nil
}

func deleteContent(c *call) (any, error) {
	n, st, err := c.storage()
	if err != nil {
		return nil, err
	}
	volid, _, err := c.volume(st)
	if err != nil {
		return nil, err
	}
	return c.startTask(n.Name, "imgdel", "", nil, func() error {
		delete(st.Volumes, volid)
		return nil
	}), nil
}

// volume is the {volume} of a content request on st: a volume ID, or a
// name on st (PVE takes "local:iso/x.iso" and "iso/x.iso" alike).
func (c *call) volume(st *Storage) (string, *Volume, error) {
	volid := c.p["volume"]
	if !strings.Contains(volid, ":") {
		volid = st.Name + ":" + volid
	}
	v, ok := st.Volumes[volid]
	if !ok {
		return volid, nil, fail(500, "volume '%s' does not exist", volid)
	}
	return volid, v, nil
}

// volumeInfo is GET .../content/{volume} (pve-storage's
// PVE/API2/Storage/Content.pm info): the volume's path, size, used and
// format; go-proxmox's Storage.ISO reads it before deleting an ISO.
func volumeInfo(c *call) (any, error) {
	_, st, err := c.storage()
	if err != nil {
		return nil, err
	}
	volid, v, err := c.volume(st)
	if err != nil {
		return nil, err
	}
	_, rel, _ := strings.Cut(volid, ":")
	return map[string]any{"path": "/var/lib/vz/" + rel, "size": v.Size, "used": v.Size, "format": v.Format}, nil
}

// importName is what PVE 8.4+/9 accepts as an import file name.
var importName = regexp.MustCompile(`^[^/]+\.(qcow2|raw|vmdk|ova|img)$`)

func downloadURL(c *call) (any, error) {
	n, st, err := c.storage()
	if err != nil {
		return nil, err
	}
	content, name := c.p["content"], c.p["filename"]
	if !contains(st.Content, content) {
		return nil, fail(500, "storage '%s' does not support content-type '%s'", st.Name, content)
	}
	if content == "import" && !importName.MatchString(name) {
		return nil, &apiErr{status: 400, msg: "Parameter verification failed.",
			errs: map[string]string{"filename": "invalid filename or wrong extension"}}
	}
	volid := fmt.Sprintf("%s:%s/%s", st.Name, content, name)
	if _, ok := st.Volumes[volid]; ok {
		return nil, fail(500, "refusing to override existing file '%s'", name)
	}
	body, ok := c.s.remote[c.p["url"]]
	url := c.p["url"]
	algo, want := c.p["checksum-algorithm"], c.p["checksum"]
	return c.startTask(n.Name, "download", name, []string{"downloading " + url + " to " + name}, func() error {
		if !ok {
			return fmt.Errorf("download failed: 404 Not Found")
		}
		if algo != "" {
			if algo != "sha256" {
				return fmt.Errorf("pvetest only checks sha256, got %s", algo)
			}
			sum := sha256.Sum256(body)
			if got := hex.EncodeToString(sum[:]); got != strings.ToLower(want) {
				return fmt.Errorf("checksum mismatch: got '%s' != expected '%s'", got, want)
			}
		}
		format := "raw"
		if strings.HasSuffix(name, ".qcow2") {
			format = "qcow2"
		} else if strings.HasSuffix(name, ".iso") {
			format = "iso"
		}
		st.Volumes[volid] = &Volume{VolID: volid, Content: content, Format: format, Size: int64(len(body)), Data: body}
		return nil
	}), nil
}

func uploadFile(c *call) (any, error) {
	n, st, err := c.storage()
	if err != nil {
		return nil, err
	}
	content := c.p["content"] // the schema already limits it to iso, vztmpl, import
	if !contains(st.Content, content) {
		return nil, fail(500, "storage '%s' does not support content-type '%s'", st.Name, content)
	}
	if c.file == nil {
		return nil, fail(400, "upload without a file part")
	}
	name := c.file.name
	if content == "iso" && !strings.HasSuffix(strings.ToLower(name), ".iso") && !strings.HasSuffix(strings.ToLower(name), ".img") {
		return nil, fail(500, "wrong file extension")
	}
	if content == "iso" && !isISO9660(c.file.data) {
		return nil, fail(500, "pvetest: %s is not an ISO 9660 image", name)
	}
	if algo := c.p["checksum-algorithm"]; algo == "sha256" {
		sum := sha256.Sum256(c.file.data)
		if hex.EncodeToString(sum[:]) != c.p["checksum"] {
			return nil, fail(500, "checksum mismatch")
		}
	}
	volid := fmt.Sprintf("%s:%s/%s", st.Name, content, name)
	data := c.file.data
	return c.startTask(n.Name, "imgcopy", "", []string{"starting file import from: /var/tmp/pveupload-0"}, func() error {
		st.Volumes[volid] = &Volume{VolID: volid, Content: content, Format: content, Size: int64(len(data)), Data: data}
		return nil
	}), nil
}

// isISO9660 looks for the primary volume descriptor at sector 16.
func isISO9660(b []byte) bool {
	return len(b) >= 0x8006 && string(b[0x8001:0x8006]) == "CD001"
}

func (s *Server) task(c *call) (*Task, error) {
	t, ok := s.tasks[c.p["upid"]]
	if !ok || t.Node != c.p["node"] {
		return nil, &apiErr{status: 400, msg: "Parameter verification failed.", errs: map[string]string{"upid": "no such task"}}
	}
	return t, nil
}

func taskStatus(c *call) (any, error) {
	t, err := c.s.task(c)
	if err != nil {
		return nil, err
	}
	out := map[string]any{"upid": t.UPID, "node": t.Node, "type": t.Type, "id": t.ID, "user": c.user,
		"pid": 4000, "pstart": 100000, "starttime": t.start.Unix(), "status": "running"}
	if t.done {
		out["status"] = "stopped"
		out["exitstatus"] = t.exit
	}
	return out, nil
}

func taskLog(c *call) (any, error) {
	t, err := c.s.task(c)
	if err != nil {
		return nil, err
	}
	start, limit := c.int("start"), 50
	if _, ok := c.p["limit"]; ok {
		limit = c.int("limit")
	}
	out := []map[string]any{}
	for i := start; i < len(t.Log) && len(out) < limit; i++ {
		out = append(out, map[string]any{"n": i + 1, "t": t.Log[i]})
	}
	return out, nil
}

func nextID(c *call) (any, error) {
	if id, ok := c.p["vmid"]; ok {
		n, _ := strconv.Atoi(id)
		if _, used := c.s.vms[n]; used {
			return nil, &apiErr{status: 400, msg: "Parameter verification failed.", errs: map[string]string{"vmid": fmt.Sprintf("VM %d already exists", n)}}
		}
		return id, nil
	}
	for id := 100; ; id++ {
		if _, used := c.s.vms[id]; !used {
			return strconv.Itoa(id), nil // PVE returns the id as a string
		}
	}
}

func (s *Server) vmEntry(v *VM) map[string]any {
	m, _ := strconv.Atoi(v.Config["memory"])
	cores, _ := strconv.Atoi(v.Config["cores"])
	e := map[string]any{"vmid": v.ID, "name": v.Name(), "status": "stopped", "maxmem": mib(m), "cpus": cores, "maxcpu": cores,
		"maxdisk": int64(40 << 30), "uptime": 0}
	if v.Running {
		e["status"] = "running"
		e["mem"] = mib(m) / 2
		e["uptime"] = 60
	}
	if v.Config["template"] == "1" {
		e["template"] = 1
	}
	if v.Config["tags"] != "" {
		e["tags"] = v.Config["tags"]
	}
	if v.Lock != "" {
		e["lock"] = v.Lock
	}
	return e
}

func listVMs(c *call) (any, error) {
	n, err := c.node()
	if err != nil {
		return nil, err
	}
	out := []map[string]any{}
	for _, v := range c.s.vms {
		if v.Node == n.Name {
			out = append(out, c.s.vmEntry(v))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i]["vmid"].(int) < out[j]["vmid"].(int) })
	return out, nil
}

func resources(c *call) (any, error) {
	out := []map[string]any{}
	if t := c.p["type"]; t == "" || t == "vm" {
		for _, v := range c.s.vms {
			e := c.s.vmEntry(v)
			e["id"], e["type"], e["node"] = fmt.Sprintf("qemu/%d", v.ID), "qemu", v.Node
			out = append(out, e)
		}
	}
	if t := c.p["type"]; t == "" || t == "node" {
		for _, n := range c.s.nodes {
			out = append(out, map[string]any{"id": "node/" + n.Name, "type": "node", "node": n.Name, "status": "online",
				"maxmem": mib(n.MemoryMiB), "maxcpu": n.CPUs})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i]["id"].(string) < out[j]["id"].(string) })
	return out, nil
}

func permissions(c *call) (any, error) {
	out := map[string]map[string]int{}
	for path, privs := range c.s.privileges {
		if p := c.p["path"]; p != "" && p != path && !strings.HasPrefix(p, strings.TrimSuffix(path, "/")+"/") {
			continue
		}
		m := map[string]int{}
		for _, pr := range privs {
			m[pr] = 1
		}
		out[path] = m
	}
	return out, nil
}

var diskKey = regexp.MustCompile(`^(scsi|virtio|sata|ide)\d+$`)

// createVM enforces the disk rules of PVE 8.4+/9 and the VMID check that
// runs before the create task forks.
func createVM(c *call) (any, error) {
	n, err := c.node()
	if err != nil {
		return nil, err
	}
	id := c.int("vmid")
	if c.s.collide > 0 {
		c.s.collide--
		if _, used := c.s.vms[id]; !used {
			c.s.vms[id] = &VM{ID: id, Node: n.Name, Files: map[string][]byte{}, Config: map[string]string{"name": "racer-" + strconv.Itoa(id), "memory": "512"}}
		}
	}
	if v, used := c.s.vms[id]; used {
		return nil, fail(500, "unable to create VM %d - VM %d already exists on node '%s'", id, id, v.Node)
	}
	cfg := map[string]string{}
	volumes := []*Volume{}
	disks := 0
	badFormat := ""
	keys := make([]string, 0, len(c.p))
	for k := range c.p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := c.p[k]
		switch k {
		case "node", "vmid", "start":
			continue
		}
		cfg[k] = v
		if !diskKey.MatchString(k) {
			continue
		}
		file, opts, _ := strings.Cut(v, ",")
		if strings.Contains(opts, "media=cdrom") {
			if file != "none" && file != "cdrom" && c.s.findVolume(n, file) == nil {
				return nil, fail(500, "%s: volume '%s' does not exist", k, file)
			}
			continue
		}
		stName, spec, ok := strings.Cut(file, ":")
		st := n.Storages[stName]
		if !ok || st == nil {
			return nil, fail(500, "%s: storage '%s' does not exist", k, stName)
		}
		if !contains(st.Content, "images") {
			return nil, fail(500, "%s: storage '%s' does not support vm images", k, stName)
		}
		if spec == "cloudinit" {
			volid := fmt.Sprintf("%s:vm-%d-cloudinit", stName, id)
			cfg[k] = volid + ",media=cdrom"
			volumes = append(volumes, &Volume{VolID: volid, Content: "images", Format: "raw", Size: 4 << 20, VMID: id})
			continue
		}
		from := optValue(opts, "import-from")
		if from != "" {
			if spec != "0" {
				return nil, &apiErr{status: 400, msg: "Parameter verification failed.",
					errs: map[string]string{k: "'import-from' requires special syntax - use <storage ID>:0,import-from=<source>"}}
			}
			src := c.s.findVolume(n, from)
			if src == nil {
				return nil, fail(500, "%s: import-from volume '%s' does not exist", k, from)
			}
			if src.Content != "import" && src.Content != "images" {
				return nil, fail(500, "%s: import-from '%s' has content '%s', need an import or images volume", k, from, src.Content)
			}
		} else if _, err := strconv.Atoi(spec); err != nil {
			if c.s.findVolume(n, file) == nil {
				return nil, fail(500, "%s: volume '%s' does not exist", k, file)
			}
			continue
		}
		if f := optValue(opts, "format"); f != "" && f != "raw" && !fileStorage(st.Type) {
			// PVE's LVM, LVM-thin, ZFS, RBD and iSCSI plugins allocate
			// raw volumes only (alloc_image dies on any other format,
			// inside the create task).
			badFormat = fmt.Sprintf("unable to create VM %d - unsupported format '%s'", id, f)
		}
		volid := fmt.Sprintf("%s:vm-%d-disk-%d", stName, id, disks)
		disks++
		cfg[k] = volid + stripOpt(opts, "import-from")
		volumes = append(volumes, &Volume{VolID: volid, Content: "images", Format: "raw", Size: 3 << 30, VMID: id})
	}
	if cfg["memory"] == "" {
		cfg["memory"] = "512"
	}
	v := &VM{ID: id, Node: n.Name, Config: cfg, Lock: "create", Files: map[string][]byte{}}
	c.s.vms[id] = v
	start := c.bool("start")
	upid := c.startTask(n.Name, "qmcreate", strconv.Itoa(id), nil, func() error {
		if badFormat != "" {
			delete(c.s.vms, id)
			return errors.New(badFormat)
		}
		for _, vol := range volumes {
			stName, _, _ := strings.Cut(vol.VolID, ":")
			n.Storages[stName].Volumes[vol.VolID] = vol
		}
		v.Lock = ""
		if start {
			v.Running = true
			v.agentUpAt = time.Now().Add(c.s.agentDelay)
			c.s.emitPower(PowerOn, v)
		}
		return nil
	})
	if c.taskExit != "" {
		delete(c.s.vms, id) // PVE removes a VM whose create failed
	}
	return upid, nil
}

// fileStorage reports whether a PVE storage type keeps disks as files, so
// that qcow2 and vmdk are allowed besides raw.
func fileStorage(typ string) bool {
	switch typ {
	case "dir", "nfs", "cifs", "glusterfs":
		return true
	}
	return false
}

// convertToTemplate is qm template: the VM must be stopped and not a
// template already; the conversion runs as a qmtemplate task.
func convertToTemplate(c *call) (any, error) {
	n, v, err := c.vm()
	if err != nil {
		return nil, err
	}
	if v.Config["template"] == "1" {
		return nil, fail(500, "you can't convert a template to a template")
	}
	if v.Running {
		return nil, fail(500, "you can't convert a VM to template if VM is running")
	}
	if v.Lock != "" {
		return nil, fail(500, "VM is locked (%s)", v.Lock)
	}
	return c.startTask(n.Name, "qmtemplate", c.p["vmid"], nil, func() error {
		v.Config["template"] = "1"
		return nil
	}), nil
}

func optValue(opts, key string) string {
	for _, o := range strings.Split(opts, ",") {
		if k, v, ok := strings.Cut(o, "="); ok && k == key {
			return v
		}
	}
	return ""
}

func stripOpt(opts, key string) string {
	var kept []string
	for _, o := range strings.Split(opts, ",") {
		if o != "" && !strings.HasPrefix(o, key+"=") {
			kept = append(kept, o)
		}
	}
	if len(kept) == 0 {
		return ""
	}
	return "," + strings.Join(kept, ",")
}

func (s *Server) findVolume(n *Node, volid string) *Volume {
	stName, _, _ := strings.Cut(volid, ":")
	if st := n.Storages[stName]; st != nil {
		return st.Volumes[volid]
	}
	return nil
}

func vmConfig(c *call) (any, error) {
	_, v, err := c.vm()
	if err != nil {
		return nil, err
	}
	out := c.s.schema.Typed("GET", "/nodes/{node}/qemu/{vmid}/config", v.Config)
	out["digest"] = DigestOf(v.Config)
	return out, nil
}

// setVMConfig is the synchronous config update. pvetest applies the keys
// labctl sets (tags, description, name) and refuses the others; a stale
// digest fails as on a real PVE.
func setVMConfig(c *call) (any, error) {
	_, v, err := c.vm()
	if err != nil {
		return nil, err
	}
	return nil, c.updateConfig(v)
}

func vmStatus(c *call) (any, error) {
	_, v, err := c.vm()
	if err != nil {
		return nil, err
	}
	e := c.s.vmEntry(v)
	e["qmpstatus"] = e["status"]
	if strings.HasPrefix(v.Config["agent"], "1") || strings.Contains(v.Config["agent"], "enabled=1") {
		e["agent"] = 1
	}
	return e, nil
}

func startVM(c *call) (any, error) {
	n, v, err := c.vm()
	if err != nil {
		return nil, err
	}
	if v.Config["template"] == "1" {
		return nil, fail(500, "you can't start a vm if it's a template")
	}
	if v.Lock != "" {
		return nil, fail(500, "VM is locked (%s)", v.Lock)
	}
	return c.startTask(n.Name, "qmstart", c.p["vmid"], []string{"generating cloud-init ISO"}, func() error {
		if !v.Running {
			v.Running = true
			v.agentUpAt = time.Now().Add(c.s.agentDelay)
			c.s.emitPower(PowerOn, v)
		}
		return nil
	}), nil
}

func stopVM(c *call) (any, error) {
	n, v, err := c.vm()
	if err != nil {
		return nil, err
	}
	return c.startTask(n.Name, "qmstop", c.p["vmid"], nil, func() error {
		if v.Running {
			v.Running = false
			c.s.emitPower(PowerOff, v)
		}
		return nil
	}), nil
}

func deleteVM(c *call) (any, error) {
	n, v, err := c.vm()
	if err != nil {
		return nil, err
	}
	if v.Running {
		return nil, fail(500, "VM %d is running - destroy failed", v.ID)
	}
	if v.Lock != "" {
		return nil, fail(500, "VM is locked (%s)", v.Lock)
	}
	v.Lock = "destroyed"
	return c.startTask(n.Name, "qmdestroy", c.p["vmid"], nil, func() error {
		for _, st := range n.Storages {
			for id, vol := range st.Volumes {
				if vol.VMID == v.ID {
					delete(st.Volumes, id)
				}
			}
		}
		delete(c.s.vms, v.ID)
		c.s.emitPower(Destroyed, v)
		return nil
	}), nil
}

func (c *call) agent() (*VM, error) {
	_, v, err := c.vm()
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(v.Config["agent"], "1") && !strings.Contains(v.Config["agent"], "enabled=1") {
		return nil, fail(500, "No QEMU guest agent configured")
	}
	if !v.Running {
		return nil, fail(500, "VM %d is not running", v.ID)
	}
	if c.s.noAgent || time.Now().Before(v.agentUpAt) {
		return nil, fail(500, "QEMU guest agent is not running")
	}
	return v, nil
}

func agentIfaces(c *call) (any, error) {
	v, err := c.agent()
	if err != nil {
		return nil, err
	}
	addrs := []map[string]any{}
	ip := optValue(v.Config["ipconfig0"], "ip")
	if c.s.addrHook != nil {
		if a, ok := c.s.addrHook(v); ok {
			ip = a
		}
	}
	if ip != "" && ip != "dhcp" {
		a, p, _ := strings.Cut(ip, "/")
		prefix, _ := strconv.Atoi(p)
		addrs = append(addrs, map[string]any{"ip-address": a, "ip-address-type": "ipv4", "prefix": prefix})
	}
	addrs = append(addrs, map[string]any{"ip-address": "fe80::be24:11ff:fe00:1", "ip-address-type": "ipv6", "prefix": 64})
	return map[string]any{"result": []map[string]any{
		{"name": "lo", "hardware-address": "00:00:00:00:00:00", "ip-addresses": []map[string]any{{"ip-address": "127.0.0.1", "ip-address-type": "ipv4", "prefix": 8}}},
		{"name": "eth0", "hardware-address": "bc:24:11:00:00:01", "ip-addresses": addrs},
	}}, nil
}

func agentFileRead(c *call) (any, error) {
	v, err := c.agent()
	if err != nil {
		return nil, err
	}
	path := c.p["file"]
	data, ok := v.Files[path]
	if !ok && c.s.fileHook != nil {
		data, ok = c.s.fileHook(v, path)
	}
	if !ok {
		return nil, fail(500, "guest-file-open failed: Failed to open file '%s': No such file or directory", path)
	}
	return map[string]any{"content": string(data)}, nil
}

var sizeRe = regexp.MustCompile(`^(\d+)G$`)

// resizeVM grows a disk to an absolute size in GiB; shrinking fails as on PVE.
func resizeVM(c *call) (any, error) {
	n, v, err := c.vm()
	if err != nil {
		return nil, err
	}
	disk := c.p["disk"]
	cur, ok := v.Config[disk]
	if !ok {
		return nil, fail(500, "disk '%s' does not exist", disk)
	}
	m := sizeRe.FindStringSubmatch(c.p["size"])
	if m == nil {
		return nil, fail(500, "pvetest: give the size as <n>G")
	}
	want, _ := strconv.Atoi(m[1])
	have := 3
	if s := optValue(cur, "size"); s != "" {
		have, _ = strconv.Atoi(strings.TrimSuffix(s, "G"))
	}
	if want < have {
		return nil, fail(500, "shrinking disks is not supported")
	}
	return c.startTask(n.Name, "resize", c.p["vmid"], nil, func() error {
		file, opts, _ := strings.Cut(cur, ",")
		v.Config[disk] = file + stripOpt(opts, "size") + fmt.Sprintf(",size=%dG", want)
		return nil
	}), nil
}

// listTasks lists a node's tasks; source=active keeps the running ones.
func listTasks(c *call) (any, error) {
	n, err := c.node()
	if err != nil {
		return nil, err
	}
	out := []map[string]any{}
	for _, t := range c.s.tasks {
		if t.Node != n.Name || (c.p["source"] == "active" && t.done) || (c.p["typefilter"] != "" && t.Type != c.p["typefilter"]) {
			continue
		}
		e := map[string]any{"upid": t.UPID, "node": t.Node, "type": t.Type, "id": t.ID, "user": c.user, "starttime": t.start.Unix()}
		if t.done {
			e["status"], e["endtime"] = t.exit, t.due.Unix()
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i]["upid"].(string) < out[j]["upid"].(string) })
	return out, nil
}
