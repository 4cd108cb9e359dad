package labstatus

import (
	"fmt"
	"io"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/mgmt"
	"github.com/labctl/labctl/internal/orphans"
	"github.com/labctl/labctl/internal/ui"
)

type ioWriter = io.Writer

// writeText prints the report as one screen: a section per part, each a
// table, with what could not be read under it.
func writeText(s *ui.IO, w io.Writer, r *Report) error {
	st := s.Styles(w)
	p := &printer{w: w}
	section := func(title string) { p.printf("%s\n", st.Header.Render(title)) }
	failed := func(what, why string) { p.printf("%s %s: %s\n", st.Failure.Render("✗"), what, why) }

	section("HYPERVISORS")
	rows := [][]string{}
	for _, h := range r.Hypervisors {
		state := st.Success.Render("reachable")
		if !h.Reachable {
			state = st.Failure.Render("unreachable")
		}
		if len(h.Nodes) == 0 {
			rows = append(rows, []string{h.Name, h.Kind, "-", state, "-", "-", "-", "-", "-"})
		}
		for _, n := range h.Nodes {
			rows = append(rows, []string{h.Name, h.Kind, n.Name, state, strconv.Itoa(n.CPUs), ui.GiB(n.MemoryMiB),
				ui.GiB(n.MemoryUsedMiB), ui.GiB(n.ReservedMiB), fmt.Sprintf("%d (%d running)", n.VMs, n.RunningVMs)})
		}
	}
	p.err(s.Table(w, []string{"NAME", "KIND", "NODE", "STATE", "CPUS", "MEMORY", "USED", "RESERVED", "VMS"}, rows))
	for _, h := range r.Hypervisors {
		if h.Error != "" {
			failed(h.Name, h.Error)
		}
	}

	m := r.Management
	p.printf("\n")
	section("MANAGEMENT")
	vm := fmt.Sprintf("VM %s on %s: %s", m.Name, m.Hypervisor, m.State)
	if m.State == "running" || m.State == "stopped" {
		where := ""
		if m.Node != "" {
			where = fmt.Sprintf(", node %s, VMID %d", m.Node, m.VMID)
		}
		cpus := fmt.Sprintf("%d vCPUs", m.CPUs)
		if m.CPUs == 1 {
			cpus = "1 vCPU"
		}
		vm += fmt.Sprintf("%s, %s, %s", where, cpus, ui.GiB(m.MemoryMiB))
	}
	p.printf("%s\n", vm)
	switch {
	case m.Stack != nil:
		ready := st.Success.Render("ready")
		if !m.Stack.Ready {
			ready = st.Failure.Render("not ready")
		}
		p.printf("stack at %s (charts by %s): %s\n", m.Stack.Server, m.Stack.Charts, ready)
		p.err(mgmt.WriteStatus(s, w, m.Stack))
	case m.StackState == "none":
		p.printf("stack: %s\n", m.StackError)
	case m.StackError != "":
		failed("stack", m.StackError)
	}

	p.printf("\n")
	section("IMAGES")
	if len(r.Images) == 0 {
		p.printf("none on the hosts that answered; build one with 'labctl image build'\n")
	} else {
		rows = rows[:0]
		for _, t := range r.Images {
			id := "-"
			if t.VMID != 0 {
				id = strconv.Itoa(t.VMID)
			}
			rows = append(rows, []string{t.Hypervisor, dash(t.Node), id, t.Name, dash(t.Image), dash(t.Kubernetes)})
		}
		p.err(s.Table(w, []string{"HYPERVISOR", "NODE", "VMID", "NAME", "IMAGE", "KUBERNETES"}, rows))
	}

	p.printf("\n")
	section("CLUSTERS")
	if len(r.Clusters) == 0 && r.ClustersError == "" {
		p.printf("none yet; create one with 'labctl cluster create NAME'\n")
	}
	if len(r.Clusters) > 0 {
		rows = rows[:0]
		for _, c := range r.Clusters {
			nodes := fmt.Sprintf("%d/%d", c.NodesReady, c.Nodes)
			if c.NodesError != "" {
				nodes = st.Failure.Render("unknown")
			}
			if c.Phase == "NotCreated" {
				nodes = "-"
			}
			first := []string{c.Name, controlPlane(c.ControlPlane, c.Phase), c.Phase, nodes}
			if len(c.Pools) == 0 {
				rows = append(rows, append(first, "-", "", "", ""))
			}
			for i, pl := range c.Pools {
				if i > 0 {
					first = []string{"", "", "", ""}
				}
				rows = append(rows, append(first, pl.Name, bound(pl.Min), strconv.FormatInt(pl.Current, 10), bound(pl.Max)))
			}
		}
		p.err(s.Table(w, []string{"NAME", "CONTROL PLANE", "PHASE", "NODES READY", "POOL", "MIN", "CURRENT", "MAX"}, rows))
	}
	if r.ClustersError != "" {
		failed("clusters", r.ClustersError)
	}
	for _, c := range r.Clusters {
		if c.NodesError != "" {
			failed(c.Name+" nodes", c.NodesError)
		}
	}

	p.printf("\n")
	section("ORPHANS")
	switch {
	case r.OrphansError != "":
		failed("orphans", r.OrphansError)
	case len(r.Orphans) == 0:
		p.printf("none found\n")
	default:
		rows = rows[:0]
		reserved := 0
		for _, o := range r.Orphans {
			name, mem, running := o.Name, "-", "-"
			if o.ID != 0 {
				name += fmt.Sprintf(" (VMID %d on %s)", o.ID, o.Node)
			}
			if o.Kind == orphans.KindVM {
				mem, running = ui.GiB(o.MemoryMiB), "no"
				if o.Running {
					running = "yes"
				}
				reserved += o.MemoryMiB
			}
			rows = append(rows, []string{o.Hypervisor, o.Kind, name, running, mem, o.Reason})
		}
		p.err(s.Table(w, []string{"HYPERVISOR", "KIND", "NAME", "RUNNING", "MEMORY", "REASON"}, rows))
		p.printf("%d orphan(s), reserving %s; 'labctl gc --dry-run' lists them, 'labctl gc' deletes them\n", len(r.Orphans), ui.GiB(reserved))
	}
	if r.OrphansNote != "" {
		p.printf("note: %s\n", r.OrphansNote)
	}
	return p.e
}

// controlPlane is "kubeadm 1/1 ready" or "kamaji 2/2 ready".
func controlPlane(cp ControlPlane, phase string) string {
	switch {
	case phase == "NotCreated":
		return fmt.Sprintf("%s (%d)", cp.Provider, cp.Replicas)
	case cp.Kind == "":
		return cp.Provider + ", not made yet"
	case !cp.Initialized:
		return fmt.Sprintf("%s %d/%d ready, not initialized", cp.Provider, cp.Ready, cp.Replicas)
	}
	return fmt.Sprintf("%s %d/%d ready", cp.Provider, cp.Ready, cp.Replicas)
}

// bound is a pool's min or max: "-" for a pool of fixed size.
func bound(b *int) string {
	if b == nil {
		return "-"
	}
	return strconv.Itoa(*b)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printer keeps the first write error.
type printer struct {
	w io.Writer
	e error
}

func (p *printer) printf(format string, a ...any) {
	if p.e == nil {
		_, p.e = fmt.Fprintf(p.w, format, a...)
	}
}

func (p *printer) err(err error) {
	if p.e == nil {
		p.e = err
	}
}

func str(obj map[string]any, path ...string) string {
	s, _, _ := unstructured.NestedString(obj, path...)
	return s
}

func num(obj map[string]any, path ...string) int64 {
	n, _, _ := unstructured.NestedInt64(obj, path...)
	return n
}
