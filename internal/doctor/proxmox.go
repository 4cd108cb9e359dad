package doctor

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/hypervisor/proxmox"
	"github.com/labctl/labctl/internal/ui"
)

// ClusterFit is CAPMOX's memory arithmetic for one workload cluster:
// per node, total × memoryAdjustment% minus the configured memory of every
// non-template VM (stopped ones too), then the control plane and as many
// workers as fit, each on the node with the most room, as CAPMOX places them.
type ClusterFit struct {
	Cluster          string `json:"cluster"`
	Hypervisor       string `json:"hypervisor"`
	MemoryAdjustment int    `json:"memoryAdjustment"`
	ControlPlanes    int    `json:"controlPlanes"`
	ControlPlaneMiB  int    `json:"controlPlaneMiB"`
	// WorkerMiB, WantMaxWorkers and MaxWorkers are the first pool's on
	// the hypervisor (Pools has each); MaxWorkers is -1 when the control
	// plane itself does not fit.
	WorkerMiB      int       `json:"workerMiB"`
	WantMaxWorkers int       `json:"wantMaxWorkers"`
	MaxWorkers     int       `json:"maxWorkers"`
	Pools          []PoolFit `json:"pools,omitempty"`
	Nodes          []NodeFit `json:"nodes"`
}

// PoolFit is one worker pool of the cluster on the hypervisor: how many
// of its workers fit once the control plane and the pools before it, at
// their max, are placed.
type PoolFit struct {
	Pool           string `json:"pool"`
	WorkerMiB      int    `json:"workerMiB"`
	WantMaxWorkers int    `json:"wantMaxWorkers"`
	MaxWorkers     int    `json:"maxWorkers"`
}

// NodeFit is one node's side of the arithmetic.
type NodeFit struct {
	Node          string `json:"node"`
	TotalMiB      int    `json:"totalMiB"`
	ReservableMiB int    `json:"reservableMiB"`
	ReservedMiB   int    `json:"reservedMiB"`
	StoppedVMs    int    `json:"stoppedVMs"`
	FreeMiB       int    `json:"freeMiB"`
}

// privilege is one privilege on one ACL path, and who needs it.
type privilege struct{ path, priv, who string }

// vmPrivs are needed on /vms: by labctl to make the management VM, by
// CAPMOX to clone and run the cluster nodes.
var (
	vmPrivsLabctl = []string{"VM.Allocate", "VM.Audit", "VM.Config.CDROM", "VM.Config.CPU", "VM.Config.Cloudinit",
		"VM.Config.Disk", "VM.Config.HWType", "VM.Config.Memory", "VM.Config.Network", "VM.Config.Options",
		"VM.PowerMgmt"}
	vmPrivsCAPMOX = []string{"VM.Allocate", "VM.Audit", "VM.Clone", "VM.Config.CDROM", "VM.Config.CPU",
		"VM.Config.Cloudinit", "VM.Config.Disk", "VM.Config.HWType", "VM.Config.Memory", "VM.Config.Network",
		"VM.Config.Options", "VM.Migrate", "VM.PowerMgmt"}
)

// requiredPrivileges lists what labctl and CAPMOX need for hypervisor p.
func requiredPrivileges(p *config.Proxmox) []privilege {
	var out []privilege
	for _, v := range vmPrivsLabctl {
		out = append(out, privilege{"/vms", v, "labctl"})
	}
	for _, v := range vmPrivsCAPMOX {
		out = append(out, privilege{"/vms", v, "CAPMOX"})
	}
	for _, n := range p.Nodes {
		out = append(out,
			privilege{"/nodes/" + n.Name, "Sys.Audit", "labctl, CAPMOX"},
			privilege{"/nodes/" + n.Name, "Sys.AccessNetwork", "labctl (download-url)"},
			privilege{"/storage/" + n.ImageStorage, "Datastore.AllocateTemplate", "labctl (image and seed ISO)"},
			privilege{"/storage/" + n.ImageStorage, "Datastore.Audit", "labctl"},
			privilege{"/storage/" + n.Storage, "Datastore.AllocateSpace", "labctl, CAPMOX"},
			privilege{"/storage/" + n.Storage, "Datastore.Audit", "CAPMOX"},
			privilege{"/sdn/zones/localnetwork/" + n.Bridge, "SDN.Use", "labctl, CAPMOX"},
		)
	}
	// One line per path and privilege, naming everyone who needs it.
	merged := map[[2]string]*privilege{}
	var order [][2]string
	for i := range out {
		k := [2]string{out[i].path, out[i].priv}
		if m, ok := merged[k]; ok {
			if !strings.Contains(m.who, out[i].who) {
				m.who += ", " + out[i].who
			}
			continue
		}
		merged[k] = &out[i]
		order = append(order, k)
	}
	res := make([]privilege, 0, len(order))
	for _, k := range order {
		res = append(res, *merged[k])
	}
	return res
}

// checkProxmox runs the Proxmox checks of every Proxmox hypervisor.
func (r *Report) checkProxmox(ctx context.Context, o Options, lab *config.Lab) {
	for _, h := range lab.Hypervisors {
		if h.Proxmox == nil {
			continue
		}
		r.checkOneProxmox(ctx, o, lab, h)
	}
}

func (r *Report) checkOneProxmox(ctx context.Context, o Options, lab *config.Lab, h config.Hypervisor) {
	p := h.Proxmox
	prefix := "proxmox " + h.Name
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	po, err := drivers.ProxmoxOptions(&h)
	var d *proxmox.Driver
	if err == nil {
		po.Warn, po.Timeout, po.Retries, po.ConnectTimeout = o.IO.Err, timeout, 2, min(timeout, proxmox.ConnectTimeout)
		d, err = proxmox.New(po)
	}
	if err != nil {
		r.add(prefix+" api", Fail, err.Error())
		return
	}
	// One bounded attempt first (proxmox.ConnectTimeout): a dead or
	// silent API fails here, named, instead of through every retry of
	// every check below.
	v, err := d.Connect(ctx)
	if err != nil {
		r.add(prefix+" api", Fail, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 4*timeout)
	defer cancel()
	r.add(prefix+" api", OK, fmt.Sprintf("%s at %s; %s; token %s accepted", v, d.URL(), tlsMode(p.TLS), p.TokenID))

	if perms, err := d.Permissions(ctx); err != nil {
		r.add(prefix+" privileges", Fail, err.Error())
	} else {
		var missing, privs []string
		for _, need := range requiredPrivileges(p) {
			if proxmox.HasPrivilege(perms, need.path, need.priv) {
				continue
			}
			if need.priv == "Sys.AccessNetwork" && proxmox.HasPrivilege(perms, "/", "Sys.Modify") {
				continue // download-url accepts Sys.Modify on / instead
			}
			missing = append(missing, fmt.Sprintf("%s %s (%s)", need.path, need.priv, need.who))
			if !slices.Contains(privs, need.priv) {
				privs = append(privs, need.priv)
			}
		}
		if len(missing) == 0 {
			r.add(prefix+" privileges", OK, fmt.Sprintf("token %s has every privilege labctl and CAPMOX need", p.TokenID))
		} else {
			r.add(prefix+" privileges", Fail, fmt.Sprintf("token %s lacks %d: %s. Fix: pveum role add Labctl -privs %q && pveum acl modify / -token '%s' -role Labctl",
				p.TokenID, len(missing), strings.Join(missing, "; "), strings.Join(privs, ","), p.TokenID))
		}
	}

	caps, vms, err := d.Inventory(ctx)
	if err != nil {
		r.add(prefix+" nodes", Fail, err.Error())
		return
	}
	have := map[string]hypervisor.NodeCapacity{}
	for _, c := range caps {
		have[c.Node] = c
	}
	var absent []string
	for _, n := range p.Nodes {
		if _, ok := have[n.Name]; !ok {
			absent = append(absent, n.Name)
		}
	}
	if len(absent) > 0 {
		names := make([]string, 0, len(caps))
		for _, c := range caps {
			names = append(names, c.Node)
		}
		r.add(prefix+" nodes", Fail, fmt.Sprintf("%s not in the PVE cluster (it has %s): fix hypervisors[%s].proxmox.nodes",
			strings.Join(absent, ", "), strings.Join(names, ", "), h.Name))
	} else {
		r.add(prefix+" nodes", OK, fmt.Sprintf("%d node(s) found", len(p.Nodes)))
	}
	for _, n := range p.Nodes {
		if _, ok := have[n.Name]; ok {
			r.checkNodeStorage(ctx, d, h.Name, n)
			r.checkNodeBridge(ctx, d, h.Name, n)
		}
	}
	for _, c := range lab.Clusters {
		if c.Hypervisor != h.Name {
			continue
		}
		r.checkTemplate(lab, c, vms)
		r.checkFit(lab, h, c, caps, vms)
	}
}

func tlsMode(t config.TLS) string {
	switch {
	case t.Fingerprint != "":
		return "TLS pinned by fingerprint"
	case t.CAFile != "":
		return "TLS verified with " + t.CAFile
	case t.InsecureSkipVerify:
		return "TLS NOT verified (insecureSkipVerify)"
	}
	return "TLS verified with the system roots"
}

func (r *Report) checkNodeStorage(ctx context.Context, d *proxmox.Driver, hv string, n config.PVENode) {
	name := fmt.Sprintf("proxmox %s storage %s", hv, n.Name)
	list, err := d.Storages(ctx, n.Name)
	if err != nil {
		r.add(name, Fail, err.Error())
		return
	}
	need := map[string][]string{n.Storage: {"images"}}
	need[n.ImageStorage] = append(need[n.ImageStorage], "import", "iso")
	var problems []string
	for _, st := range []string{n.Storage, n.ImageStorage} {
		wants, ok := need[st]
		if !ok {
			continue
		}
		delete(need, st)
		i := slices.IndexFunc(list, func(s proxmox.Storage) bool { return s.Name == st })
		if i < 0 {
			problems = append(problems, fmt.Sprintf("storage %s does not exist on %s", st, n.Name))
			continue
		}
		var lack []string
		for _, w := range wants {
			if !slices.Contains(list[i].Content, w) {
				lack = append(lack, w)
			}
		}
		if len(lack) > 0 {
			problems = append(problems, fmt.Sprintf("storage %s lacks content %s: pvesm set %s --content %s",
				st, strings.Join(lack, ","), st, strings.Join(append(slices.Clone(list[i].Content), lack...), ",")))
		}
	}
	if len(problems) > 0 {
		r.add(name, Fail, strings.Join(problems, "; "))
		return
	}
	vm := list[slices.IndexFunc(list, func(s proxmox.Storage) bool { return s.Name == n.Storage })]
	r.add(name, OK, fmt.Sprintf("%s (%s, %s disks) holds images; %s holds import and iso", n.Storage, vm.Type, vm.DiskFormat(), n.ImageStorage))
}

func (r *Report) checkNodeBridge(ctx context.Context, d *proxmox.Driver, hv string, n config.PVENode) {
	name := fmt.Sprintf("proxmox %s bridge %s", hv, n.Name)
	bridges, err := d.Bridges(ctx, n.Name)
	switch {
	case err != nil:
		r.add(name, Fail, err.Error())
	case !slices.Contains(bridges, n.Bridge):
		r.add(name, Fail, fmt.Sprintf("bridge %s does not exist on %s (it has %s): fix hypervisors[%s].proxmox.nodes[%s].bridge",
			n.Bridge, n.Name, strings.Join(bridges, ", "), hv, n.Name))
	default:
		r.add(name, OK, fmt.Sprintf("%s exists on %s", n.Bridge, n.Name))
	}
}

func (r *Report) checkTemplate(lab *config.Lab, c config.Cluster, vms []hypervisor.VM) {
	name := fmt.Sprintf("cluster %s template", c.Name)
	t := c.Template
	for _, v := range vms {
		if !v.Template {
			continue
		}
		if t.TemplateID != 0 && v.ID == t.TemplateID && (t.SourceNode == "" || v.Node == t.SourceNode) {
			r.add(name, OK, fmt.Sprintf("template %d (%s) on %s", v.ID, v.Name, v.Node))
			return
		}
		if t.Image != "" && slices.Contains(v.Tags, hypervisor.ImageTag(t.Image)) {
			r.add(name, OK, fmt.Sprintf("image %s is template %d on %s", t.Image, v.ID, v.Node))
			return
		}
	}
	if t.Image != "" {
		r.add(name, Fail, fmt.Sprintf("no template tagged %s for clusters[%s].template.image: run 'labctl image build %s'",
			hypervisor.ImageTag(t.Image), c.Name, t.Image))
		return
	}
	r.add(name, Fail, fmt.Sprintf("no template %d on %s: fix clusters[%s].template", t.TemplateID, t.SourceNode, c.Name))
}

func mebibytes(q string) int {
	v, err := resource.ParseQuantity(q)
	if err != nil {
		return 0
	}
	return int(v.Value() >> 20)
}

// Fit does CAPMOX's memory arithmetic for cluster c. VMs of the cluster
// itself (named <cluster>-...) are left out, so a running cluster is not
// counted twice; the management VM is counted even before it exists.
func Fit(lab *config.Lab, h config.Hypervisor, c config.Cluster, caps []hypervisor.NodeCapacity, vms []hypervisor.VM) ClusterFit {
	cps := c.ControlPlane.Replicas
	if c.Kamaji() {
		cps = 0 // pods in the management cluster, not VMs on h
	}
	f := ClusterFit{Cluster: c.Name, Hypervisor: h.Name, MemoryAdjustment: c.MemoryAdjustment,
		ControlPlanes: cps, ControlPlaneMiB: mebibytes(c.ControlPlane.Size.Memory)}
	// Every pool of the cluster on h (pools on KVM hosts take no Proxmox
	// memory).
	for _, p := range c.Pools {
		if len(p.Hypervisors) > 0 && p.Hypervisors[0] == h.Name {
			f.Pools = append(f.Pools, PoolFit{Pool: p.Name, WorkerMiB: mebibytes(p.Size.Memory), WantMaxWorkers: p.Max})
		}
	}
	allowed := lab.AllowedNodes(&c)
	m := lab.Management
	mgmtExists := slices.ContainsFunc(vms, func(v hypervisor.VM) bool { return v.Name == m.Name && v.Lab == lab.Metadata.Name })
	for _, cp := range caps {
		if !slices.Contains(allowed, cp.Node) {
			continue
		}
		n := NodeFit{Node: cp.Node, TotalMiB: cp.MemoryMiB, ReservableMiB: cp.MemoryMiB * c.MemoryAdjustment / 100}
		for _, v := range vms {
			if v.Node != cp.Node || v.Template || strings.HasPrefix(v.Name, c.Name+"-") {
				continue
			}
			n.ReservedMiB += v.MemoryMiB
			if !v.Running {
				n.StoppedVMs++
			}
		}
		if !mgmtExists && m.Hypervisor == h.Name && m.Node == cp.Node {
			n.ReservedMiB += mebibytes(m.Size.Memory)
		}
		n.FreeMiB = n.ReservableMiB - n.ReservedMiB
		f.Nodes = append(f.Nodes, n)
	}
	free := make([]int, len(f.Nodes))
	for i, n := range f.Nodes {
		free[i] = n.FreeMiB
	}
	place := func(need int) bool {
		best := -1
		for i := range free {
			if best < 0 || free[i] > free[best] {
				best = i
			}
		}
		if best < 0 || need <= 0 || free[best] < need {
			return false
		}
		free[best] -= need
		return true
	}
	for range f.ControlPlanes {
		if !place(f.ControlPlaneMiB) {
			f.MaxWorkers = -1 // the control plane itself does not fit
			return f
		}
	}
	for i := range f.Pools {
		p := &f.Pools[i]
		// How many fit, on what the earlier pools at their max leave.
		left := slices.Clone(free)
		for p.MaxWorkers < 100000 && place(p.WorkerMiB) {
			p.MaxWorkers++
		}
		free = left
		for range p.WantMaxWorkers {
			place(p.WorkerMiB)
		}
	}
	if len(f.Pools) > 0 {
		f.WorkerMiB, f.WantMaxWorkers, f.MaxWorkers = f.Pools[0].WorkerMiB, f.Pools[0].WantMaxWorkers, f.Pools[0].MaxWorkers
	}
	return f
}

func (r *Report) checkFit(lab *config.Lab, h config.Hypervisor, c config.Cluster, caps []hypervisor.NodeCapacity, vms []hypervisor.VM) {
	name := fmt.Sprintf("cluster %s memory", c.Name)
	f := Fit(lab, h, c, caps, vms)
	r.Capacity = append(r.Capacity, f)
	var per []string
	sort.Slice(f.Nodes, func(i, j int) bool { return f.Nodes[i].Node < f.Nodes[j].Node })
	for _, n := range f.Nodes {
		per = append(per, fmt.Sprintf("%s: %s × %d%% = %s reservable − %s reserved (%d stopped VMs count too) = %s free",
			n.Node, ui.GiB(n.TotalMiB), f.MemoryAdjustment, ui.GiB(n.ReservableMiB), ui.GiB(n.ReservedMiB), n.StoppedVMs, ui.GiB(n.FreeMiB)))
	}
	if f.MaxWorkers < 0 {
		r.add(name, Fail, fmt.Sprintf("the control plane (%d × %s) does not fit: %s. Fix: raise clusters[%s].memoryAdjustment or delete VMs",
			f.ControlPlanes, ui.GiB(f.ControlPlaneMiB), strings.Join(per, "; "), c.Name))
		return
	}
	status, details, fixes := OK, []string{}, []string{}
	for _, p := range f.Pools {
		field, max := "workers.max", "workers.max"
		if len(f.Pools) > 1 || p.Pool != config.DefaultPool {
			field, max = "pools["+p.Pool+"].max", "pool "+p.Pool+" max"
		}
		details = append(details, fmt.Sprintf("max workers that fit: %d of %s (%s %d)", p.MaxWorkers, ui.GiB(p.WorkerMiB), max, p.WantMaxWorkers))
		if p.MaxWorkers < p.WantMaxWorkers {
			status = Fail
			fixes = append(fixes, fmt.Sprintf("lower clusters[%s].%s to %d", c.Name, field, p.MaxWorkers))
		}
	}
	detail := strings.Join(append(details, strings.Join(per, "; ")), "; ")
	if status == Fail {
		detail += ". Fix: " + strings.Join(fixes, ", ") + ", raise memoryAdjustment, or delete stopped VMs"
	}
	r.add(name, status, detail)
}
