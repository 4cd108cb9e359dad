// Package labstatus is 'labctl status': one screen for the whole lab. It
// reads every hypervisor, the management VM and its stack, and every
// workload cluster at once, each part under its own deadline, so a dead
// host or a hung API server shows as such and never holds up the rest.
package labstatus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/imagebuild"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/mgmt"
	"github.com/labctl/labctl/internal/orphans"
	"github.com/labctl/labctl/internal/redact"
	"github.com/labctl/labctl/internal/ui"
)

// DefaultTimeout bounds each part: one hypervisor, the management stack,
// the clusters' list, one cluster's Nodes. 8 s, not 10: with start-up and
// printing, a dead host is on the screen within 10 s.
const DefaultTimeout = 8 * time.Second

// ErrIncomplete means some part could not be read; the report says which
// and why.
var ErrIncomplete = errors.New("some parts of the lab could not be read")

// Options are the inputs of Status.
type Options struct {
	IO     *ui.IO
	Lab    *config.Lab
	Output string // text, json or yaml
	// Driver opens the lab's hypervisor called name.
	Driver func(ctx context.Context, name string) (hypervisor.Driver, error)
	// Mgmt is the management cluster.
	Mgmt func(ctx context.Context) (*kube.Client, error)
	// Workload is a workload cluster's REST config, from its kubeconfig
	// Secret on the management cluster.
	Workload func(ctx context.Context, cluster string) (*rest.Config, error)
	// Timeout bounds each part; 0 means DefaultTimeout.
	Timeout time.Duration
	Verbose int
}

func (o Options) timeout() time.Duration {
	if o.Timeout > 0 {
		return o.Timeout
	}
	return DefaultTimeout
}

// Report is what 'labctl status' shows; -o json|yaml prints it whole.
// docs/day2.md lists its fields, which are kept stable.
type Report struct {
	Lab         string       `json:"lab"`
	Hypervisors []Hypervisor `json:"hypervisors"`
	Management  Management   `json:"management"`
	// Images are the node images on the hosts: Proxmox templates tagged
	// labctl and the libvirt pools' node image volumes.
	Images   []imagebuild.Template `json:"images"`
	Clusters []Cluster             `json:"clusters"`
	// ClustersError says why the clusters could not be listed.
	ClustersError string `json:"clustersError,omitempty"`
	// Orphans are what labctl made on the hosts that nothing owns any
	// more, as 'labctl gc' finds them.
	Orphans []orphans.Orphan `json:"orphans"`
	// OrphansNote says what the search could not cover: hosts that did
	// not answer, or no management cluster to say which VMs are owned.
	OrphansNote string `json:"orphansNote,omitempty"`
	// OrphansError says why no orphan could be looked for.
	OrphansError string `json:"orphansError,omitempty"`
	// Complete is false when any part could not be read.
	Complete bool `json:"complete"`
}

// Hypervisor is one hypervisor of lab.yaml.
type Hypervisor struct {
	Name string `json:"name"`
	Kind string `json:"kind"` // proxmox or libvirt
	// Endpoint is the Proxmox API URL or the libvirt URI, without any
	// userinfo.
	Endpoint  string `json:"endpoint"`
	Reachable bool   `json:"reachable"`
	// Version is what answered, e.g. "PVE 8.4.1" (Proxmox only).
	Version string `json:"version,omitempty"`
	// Error says what failed and what to check; Field is the lab.yaml
	// field that says where the host is.
	Error string `json:"error,omitempty"`
	Field string `json:"field"`
	Nodes []Node `json:"nodes"`
}

// Node is one Proxmox node or one libvirt host, with its memory as CAPMOX
// counts it: ReservedMiB is the configured memory of every VM that is not
// a template, stopped ones included.
type Node struct {
	Name          string `json:"name"`
	CPUs          int    `json:"cpus"`
	MemoryMiB     int    `json:"memoryMiB"`
	MemoryUsedMiB int    `json:"memoryUsedMiB"`
	ReservedMiB   int    `json:"memoryReservedMiB"`
	VMs           int    `json:"vms"`
	RunningVMs    int    `json:"runningVMs"`
}

// Management is the management VM and the stack on it.
type Management struct {
	Hypervisor string `json:"hypervisor"`
	Name       string `json:"name"`
	// State is running, stopped, missing (the host answered and has no
	// such VM of this lab) or unknown (the host did not answer).
	State     string `json:"state"`
	Node      string `json:"node,omitempty"`
	VMID      int    `json:"vmid,omitempty"`
	CPUs      int    `json:"cpus,omitempty"`
	MemoryMiB int    `json:"memoryMiB,omitempty"`
	// StackState is ready, not-ready, none (no management cluster yet:
	// not a failure) or unknown (StackError says why).
	StackState string `json:"stackState"`
	// Stack is what 'labctl mgmt status' reports.
	Stack *mgmt.Report `json:"stack,omitempty"`
	// StackError says why the stack could not be read.
	StackError string `json:"stackError,omitempty"`
}

// Cluster is one workload cluster.
type Cluster struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// Phase is the Cluster's status.phase, or "NotCreated" for a cluster
	// of lab.yaml the management cluster does not have.
	Phase        string       `json:"phase"`
	Version      string       `json:"version,omitempty"`
	Endpoint     string       `json:"endpoint,omitempty"`
	ControlPlane ControlPlane `json:"controlPlane"`
	Pools        []Pool       `json:"pools"`
	// NodesReady and Nodes count the workload cluster's own Nodes, read
	// through its kubeconfig Secret; NodesError says why they could not be.
	NodesReady int    `json:"nodesReady"`
	Nodes      int    `json:"nodes"`
	NodesError string `json:"nodesError,omitempty"`
}

// ControlPlane is a cluster's control plane.
type ControlPlane struct {
	// Provider is kubeadm (control-plane VMs) or kamaji (a tenant: pods
	// on the management cluster).
	Provider    string `json:"provider"`
	Kind        string `json:"kind,omitempty"`
	Initialized bool   `json:"initialized"`
	Replicas    int64  `json:"replicas"`
	Ready       int64  `json:"readyReplicas"`
}

// Pool is one worker pool: its autoscaler bounds (absent when fixed) and
// the machines it has now.
type Pool struct {
	Name           string `json:"name"`
	Min            *int   `json:"min,omitempty"`
	Current        int64  `json:"current"`
	Max            *int   `json:"max,omitempty"`
	Infrastructure string `json:"infrastructure,omitempty"`
}

// Status reads the whole lab, every part at once, and prints it. It
// returns ErrIncomplete, after printing, when a part could not be read.
func Status(ctx context.Context, o Options) (*Report, error) {
	r := Read(ctx, o)
	if err := o.IO.Print(o.Output, r, func(w ioWriter) error { return writeText(o.IO, w, r) }); err != nil {
		return r, err
	}
	if !r.Complete {
		return r, ErrIncomplete
	}
	return r, nil
}

// Read reads every part in parallel, each within o.Timeout. It never
// fails as a whole: what could not be read says why in its part.
func Read(ctx context.Context, o Options) *Report {
	lab := o.Lab
	r := &Report{Lab: lab.Metadata.Name, Hypervisors: make([]Hypervisor, len(lab.Hypervisors)),
		Images: []imagebuild.Template{}, Clusters: []Cluster{}}
	r.Management = Management{Hypervisor: lab.Management.Hypervisor, Name: lab.Management.Name, State: "unknown"}
	images := make([][]imagebuild.Template, len(lab.Hypervisors))
	var mu sync.Mutex // guards r.Management
	var wg sync.WaitGroup
	for i, h := range lab.Hypervisors {
		wg.Go(func() {
			hv, imgs, vm := readHost(ctx, o, h)
			r.Hypervisors[i], images[i] = hv, imgs
			if h.Name == lab.Management.Hypervisor {
				mu.Lock()
				setVM(&r.Management, hv, vm)
				mu.Unlock()
			}
		})
	}
	wg.Go(func() {
		st, err := bounded(ctx, o.timeout(), func(ctx context.Context) (*mgmt.Report, error) {
			return mgmt.ReadStatus(ctx, mgmt.StatusOptions{IO: o.IO, Lab: lab, Mgmt: o.Mgmt, Verbose: o.Verbose})
		})
		mu.Lock()
		defer mu.Unlock()
		r.Management.Stack = st
		switch {
		case errors.Is(err, kube.ErrNoMgmt):
			// Not a failure to read: there is nothing to read yet.
			r.Management.StackState, r.Management.StackError = "none", err.Error()
		case err != nil:
			r.Management.StackState = "unknown"
			r.Management.StackError = partError("reading the management stack", err, o.timeout())
		case st.Ready:
			r.Management.StackState = "ready"
		default:
			r.Management.StackState = "not-ready"
		}
	})
	wg.Go(func() { r.Orphans, r.OrphansNote, r.OrphansError = readOrphans(ctx, o) })
	wg.Go(func() {
		cls, err := readClusters(ctx, o)
		r.Clusters = cls
		if err != nil {
			r.ClustersError = err.Error()
		}
	})
	wg.Wait()
	for _, imgs := range images {
		r.Images = append(r.Images, imgs...)
	}
	r.Complete = r.ClustersError == "" && r.Management.StackState != "unknown" && r.OrphansError == ""
	for _, h := range r.Hypervisors {
		r.Complete = r.Complete && h.Error == ""
	}
	for _, c := range r.Clusters {
		r.Complete = r.Complete && c.NodesError == ""
	}
	return r
}

// bounded runs f and returns when it does or when timeout has passed,
// whichever is first. Some calls take no context (go-libvirt's RPCs, the
// Helm SDK's reads): they are left to end when their connection is
// closed, and the caller moves on.
func bounded[T any](ctx context.Context, timeout time.Duration, f func(ctx context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f(ctx)
		done <- result{v, err}
	}()
	select {
	case res := <-done:
		return res.v, res.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// partError words a part's failure; a deadline becomes "no answer within".
func partError(what string, err error, timeout time.Duration) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("%s: no answer within %s", what, timeout)
	}
	return fmt.Sprintf("%s: %v", what, err)
}

// hostRead is what one hypervisor gave.
type hostRead struct {
	version string
	caps    []hypervisor.NodeCapacity
	images  []imagebuild.Template
	mgmtVM  *hypervisor.VM
	// reached is set once the host answered; it is the one field read
	// while the read may still run.
	reached atomic.Bool
}

// readHost reads one hypervisor within the timeout. The driver is closed
// when the time is up, which ends a call that takes no context.
func readHost(ctx context.Context, o Options, h config.Hypervisor) (Hypervisor, []imagebuild.Template, *hypervisor.VM) {
	hv := Hypervisor{Name: h.Name, Nodes: []Node{}}
	switch {
	case h.Proxmox != nil:
		hv.Kind, hv.Endpoint, hv.Field = "proxmox", redact.URL(h.Proxmox.URL), fmt.Sprintf("hypervisors[%s].proxmox.url", h.Name)
	case h.Libvirt != nil:
		hv.Kind, hv.Endpoint, hv.Field = "libvirt", redact.URL(h.Libvirt.URI), fmt.Sprintf("hypervisors[%s].libvirt.uri", h.Name)
	}
	var (
		mu     sync.Mutex
		drv    hypervisor.Driver
		closed bool
	)
	keep := func(d hypervisor.Driver) bool {
		mu.Lock()
		defer mu.Unlock()
		drv = d
		return !closed
	}
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		closed = true
		if drv != nil {
			_ = drivers.Close(drv)
		}
	}()
	got := &hostRead{}
	res, err := bounded(ctx, o.timeout(), func(ctx context.Context) (*hostRead, error) {
		return got, readHostNow(ctx, o, h, got, keep)
	})
	hv.Reachable = got.reached.Load()
	if res == nil {
		// The time ran out: the read may still write to got.
		res = &hostRead{}
	}
	hv.Version = res.version
	if err != nil {
		hv.Error = hostError(hv, err, o.timeout())
	}
	for _, c := range res.caps {
		hv.Nodes = append(hv.Nodes, Node{Name: c.Node, CPUs: c.CPUs, MemoryMiB: c.MemoryMiB, MemoryUsedMiB: c.MemoryUsedMiB,
			ReservedMiB: c.ReservedMiB, VMs: c.VMs, RunningVMs: c.RunningVMs})
	}
	return hv, res.images, res.mgmtVM
}

// readHostNow connects to the host, then reads its nodes, its images and,
// on the management VM's hypervisor, that VM.
func readHostNow(ctx context.Context, o Options, h config.Hypervisor, got *hostRead, keep func(hypervisor.Driver) bool) error {
	d, err := o.Driver(ctx, h.Name)
	if err != nil {
		return err
	}
	if !keep(d) {
		_ = drivers.Close(d)
		return context.DeadlineExceeded
	}
	if c, ok := d.(hypervisor.Connector); ok {
		v, err := c.Connect(ctx)
		if err != nil {
			return err
		}
		got.version = v
	}
	got.reached.Store(true)
	caps, err := d.Capacity(ctx)
	if err != nil {
		return fmt.Errorf("reading its nodes' capacity: %w", err)
	}
	got.caps = caps
	imgs, err := imagebuild.HostImages(ctx, o.Lab, d)
	if err != nil {
		return fmt.Errorf("listing its node images: %w", err)
	}
	got.images = imgs
	if h.Name == o.Lab.Management.Hypervisor {
		vm, err := d.FindVM(ctx, o.Lab.Metadata.Name, o.Lab.Management.Name)
		switch {
		case errors.Is(err, hypervisor.ErrNotFound):
		case err != nil:
			return fmt.Errorf("looking for the management VM %s: %w", o.Lab.Management.Name, err)
		default:
			got.mgmtVM = &vm
		}
	}
	return nil
}

// hostError says what failed, with the lab.yaml field and what to check.
// The drivers' own errors already say what to check; a host that let the
// time pass gets it here.
func hostError(hv Hypervisor, err error, timeout time.Duration) string {
	if errors.Is(err, context.DeadlineExceeded) {
		check := "that the host is up, that this machine reaches it, and that libvirtd listens there"
		if hv.Kind == "proxmox" {
			check = "that the URL is the PVE API (https://<host>:8006), that this machine reaches the node, and that pveproxy runs there"
		}
		if hv.Reachable {
			return fmt.Sprintf("%s answered, then stopped answering within %s; check %s (%s)", hv.Endpoint, timeout, check, hv.Field)
		}
		return fmt.Sprintf("%s did not answer within %s; check %s, and %s", hv.Endpoint, timeout, hv.Field, check)
	}
	msg := err.Error()
	if !strings.Contains(msg, hv.Field) {
		msg += " (" + hv.Field + ")"
	}
	return msg
}

// setVM fills the management VM's part from its hypervisor's read.
func setVM(m *Management, hv Hypervisor, vm *hypervisor.VM) {
	switch {
	case vm != nil:
		m.State = "stopped"
		if vm.Running {
			m.State = "running"
		}
		m.Node, m.VMID, m.CPUs, m.MemoryMiB = vm.Node, vm.ID, vm.CPUs, vm.MemoryMiB
	case hv.Error == "":
		m.State = "missing"
	}
}

var nodeGVK = schema.GroupVersionKind{Version: "v1", Kind: "Node"}

// readClusters lists the clusters on the management cluster, adds the
// clusters of lab.yaml it lacks, and reads each one's Nodes, all at once.
func readClusters(ctx context.Context, o Options) ([]Cluster, error) {
	t := o.timeout()
	list, err := bounded(ctx, t, func(ctx context.Context) ([]cluster.Summary, error) {
		mc, err := o.Mgmt(ctx)
		if err != nil {
			return nil, err
		}
		return cluster.List(ctx, cluster.Options{Lab: o.Lab, Mgmt: mc})
	})
	if errors.Is(err, kube.ErrNoMgmt) {
		return notCreated(o.Lab, nil), nil
	}
	if err != nil {
		return notCreated(o.Lab, nil), errors.New(partError("listing the clusters on the management cluster", err, t))
	}
	out := make([]Cluster, len(list))
	var wg sync.WaitGroup
	for i, s := range list {
		out[i] = fromSummary(o.Lab, s)
		wg.Go(func() { readCluster(ctx, o, &out[i]) })
	}
	wg.Wait()
	return append(out, notCreated(o.Lab, list)...), nil
}

// fromSummary is a cluster as 'cluster list' reads it.
func fromSummary(lab *config.Lab, s cluster.Summary) Cluster {
	c := Cluster{Name: s.Name, Namespace: s.Namespace, Phase: s.Phase, Version: s.Version, Endpoint: s.Endpoint, Pools: []Pool{}}
	c.ControlPlane.Kind = s.ControlPlaneKind
	c.ControlPlane.Initialized = s.ControlPlane == "initialized"
	switch s.ControlPlaneKind {
	case clusterapi.KamajiControlPlaneGVK.Kind:
		c.ControlPlane.Provider = config.ControlPlaneKamaji
	case clusterapi.KubeadmControlPlaneGVK.Kind:
		c.ControlPlane.Provider = config.ControlPlaneKubeadm
	case "":
		// The topology controller has not made it yet: say what lab.yaml asks.
		if lc, err := lab.Cluster(s.Name); err == nil {
			c.ControlPlane.Provider = providerOf(lc)
		}
	default:
		c.ControlPlane.Provider = s.ControlPlaneKind
	}
	for _, p := range s.Pools {
		c.Pools = append(c.Pools, Pool{Name: p.Name, Min: p.Min, Current: p.Workers, Max: p.Max, Infrastructure: p.Infrastructure})
	}
	return c
}

func providerOf(c *config.Cluster) string {
	if c.Kamaji() {
		return config.ControlPlaneKamaji
	}
	return config.ControlPlaneKubeadm
}

// notCreated are lab.yaml's clusters that list lacks, with the pools
// lab.yaml gives them.
func notCreated(lab *config.Lab, list []cluster.Summary) []Cluster {
	var out []Cluster
	for i := range lab.Clusters {
		lc := &lab.Clusters[i]
		if slices.ContainsFunc(list, func(s cluster.Summary) bool { return s.Name == lc.Name }) {
			continue
		}
		c := Cluster{Name: lc.Name, Namespace: clusterapi.Namespace(lc.Name), Phase: "NotCreated", Version: lc.KubernetesVersion,
			ControlPlane: ControlPlane{Provider: providerOf(lc), Replicas: int64(lc.ControlPlane.Replicas)}, Pools: []Pool{}}
		for _, p := range lc.Pools {
			pool := Pool{Name: p.Name}
			if p.Autoscaled() {
				pool.Min, pool.Max = &p.Min, &p.Max
			}
			c.Pools = append(c.Pools, pool)
		}
		out = append(out, c)
	}
	return out
}

// readCluster reads the control plane's replicas from the management
// cluster and the Nodes from the workload cluster, within the timeout.
func readCluster(ctx context.Context, o Options, c *Cluster) {
	t := o.timeout()
	type nodes struct{ ready, all int }
	var wg sync.WaitGroup
	wg.Go(func() {
		ref := kube.Ref{Namespace: c.Namespace}
		switch c.ControlPlane.Kind {
		case clusterapi.KubeadmControlPlaneGVK.Kind:
			ref.GVK = clusterapi.KubeadmControlPlaneGVK
		case clusterapi.KamajiControlPlaneGVK.Kind:
			ref.GVK = clusterapi.KamajiControlPlaneGVK
		default:
			return
		}
		cp, _ := bounded(ctx, t, func(ctx context.Context) (*ControlPlane, error) {
			mc, err := o.Mgmt(ctx)
			if err != nil {
				return nil, err
			}
			cl, found, err := mc.Get(ctx, kube.Ref{GVK: clusterapi.ClusterGVK, Namespace: c.Namespace, Name: c.Name})
			if err != nil || !found {
				return nil, err
			}
			ref.Name = str(cl.Object, "spec", "controlPlaneRef", "name")
			obj, found, err := mc.Get(ctx, ref)
			if err != nil || !found {
				return nil, err
			}
			return &ControlPlane{Replicas: num(obj.Object, "spec", "replicas"), Ready: num(obj.Object, "status", "readyReplicas")}, nil
		})
		if cp != nil {
			c.ControlPlane.Replicas, c.ControlPlane.Ready = cp.Replicas, cp.Ready
		}
	})
	var server atomic.Pointer[string]
	n, err := bounded(ctx, t, func(ctx context.Context) (nodes, error) {
		cfg, err := o.Workload(ctx, c.Name)
		if err != nil {
			return nodes{}, err
		}
		server.Store(&cfg.Host)
		cfg.Timeout = t
		list, err := kube.NewForConfig(cfg, "cluster "+c.Name).List(ctx, nodeGVK, "", "")
		if err != nil {
			return nodes{}, err
		}
		n := nodes{all: len(list)}
		for _, u := range list {
			var node corev1.Node
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &node); err != nil {
				return nodes{}, fmt.Errorf("reading Node %s: %w", u.GetName(), err)
			}
			if kube.NodeReady(&node) {
				n.ready++
			}
		}
		return n, nil
	})
	wg.Wait()
	c.NodesReady, c.Nodes = n.ready, n.all
	switch {
	case err != nil && server.Load() != nil:
		c.NodesError = partError("reading the workload cluster's Nodes at "+*server.Load(), err, t) +
			"; check that its API server runs (labctl cluster describe " + c.Name + ")"
	case err != nil:
		c.NodesError = partError("reading the workload cluster's Nodes", err, t)
	}
}

// readOrphans finds the orphans as 'labctl gc' does, within the timeout
// like every other part. Find reads the management cluster's Machines
// first, then each host within four fifths of the timeout, so a dead
// host is named as not looked at, beside the others' orphans, before the
// part's own deadline.
func readOrphans(ctx context.Context, o Options) (found []orphans.Orphan, note, failed string) {
	t := o.timeout()
	found = []orphans.Orphan{}
	mc, err := o.Mgmt(ctx)
	switch {
	case errors.Is(err, kube.ErrNoMgmt):
		mc = nil
		note = "no management cluster: only what labctl's own marks prove unowned is listed (no node VM, template or node image)"
	case err != nil:
		return found, "", fmt.Sprintf("the management cluster says which VMs are owned, and it could not be reached: %v", err)
	}
	res, err := bounded(ctx, t, func(ctx context.Context) ([]orphans.Orphan, error) {
		return orphans.Find(ctx, orphans.Input{Lab: o.Lab, Driver: o.Driver, Mgmt: mc, HostTimeout: t * 4 / 5})
	})
	if res != nil {
		found = res
	}
	var unreachable *orphans.UnreachableError
	switch {
	case errors.As(err, &unreachable):
		names := make([]string, len(unreachable.Hosts))
		for i, h := range unreachable.Hosts {
			names[i] = h.Hypervisor
		}
		note = strings.TrimPrefix(note+"; ", "; ") + "not looked for on " + strings.Join(names, ", ") + ", which could not be read (see HYPERVISORS)"
	case err != nil:
		return found, note, partError("looking for orphans", err, t)
	}
	return found, note, ""
}
