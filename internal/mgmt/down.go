package mgmt

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/step"
	"github.com/labctl/labctl/internal/ui"
)

// ErrNoManagement means the lab has no management cluster yet: nothing
// names a kubeconfig and mgmt up has stored none (kube.ErrNoMgmt).
var ErrNoManagement = kube.ErrNoMgmt

// ErrAborted means the user answered no; nothing was changed.
var ErrAborted = errors.New("aborted: nothing was deleted")

// DownOptions are the inputs of 'labctl mgmt down'.
type DownOptions struct {
	IO     *ui.IO
	Lab    *config.Lab
	DryRun bool
	// Yes skips the question.
	Yes    bool
	Driver DriverFunc
	// Mgmt reaches the management cluster; an error wrapping
	// ErrNoManagement means there is none, so no workload cluster to
	// look for.
	Mgmt func(ctx context.Context) (*kube.Client, error)
	// Cascade deletes the workload clusters through Cluster API first,
	// and waits until their VMs are gone from the hypervisors; without
	// it, Down refuses while any exist.
	Cascade bool
	// SkipClusterCheck deletes the VMs without asking the management
	// cluster, for one that no longer answers.
	SkipClusterCheck bool
	// Timeout bounds each wait of a cluster deletion; 0 is the default.
	Timeout time.Duration
}

func (o DownOptions) timeout() time.Duration {
	if o.Timeout > 0 {
		return o.Timeout
	}
	return cluster.DefaultTimeout
}

// Down deletes the VMs labctl made for this lab on the management
// hypervisor: stop, wait, delete with their disks. VMs without labctl's
// tags for this lab are never listed, so never touched.
func Down(ctx context.Context, o DownOptions) error {
	lab := o.Lab
	drv, err := o.Driver(ctx, lab.Management.Hypervisor)
	if err != nil {
		return dryRunReach(o.DryRun, lab, lab.Management.Hypervisor, err)
	}
	defer func() { _ = drivers.Close(drv) }()
	// A dry run goes on past a hypervisor it cannot reach: the workload
	// clusters, which decide whether down may go ahead, live on the
	// management cluster, and the plan says which VMs it could not list.
	var unreached *hypervisor.Unreachable
	if o.DryRun {
		unreached, err = drivers.ReachForPlan(ctx, o.IO, drv)
	} else {
		err = drivers.Reach(ctx, o.IO, drv)
	}
	if err != nil {
		return dryRunReach(o.DryRun, lab, lab.Management.Hypervisor, err)
	}
	name := lab.Metadata.Name
	var vms []hypervisor.VM
	if unreached == nil {
		if vms, err = drv.ListVMs(ctx, name); err != nil {
			return fmt.Errorf("listing the VMs of lab %s on %s: %w", name, drv.Name(), err)
		}
		if len(vms) == 0 {
			fmt.Fprintf(o.IO.Err, "no VM of lab %s on %s: nothing to delete\n", name, drv.Name())
			return nil
		}
	}
	// Before anything goes: the workload clusters live only in the
	// management cluster's Cluster API objects. Deleting it under them
	// would orphan their VMs, with nothing left that knows them.
	workloads, mc, err := workloadClusters(ctx, o, lab)
	if err != nil {
		return err
	}
	if len(workloads) > 0 && !o.Cascade {
		return fmt.Errorf("refusing to delete the management VM of lab %s: Cluster API there still manages %d workload cluster(s), whose VMs would be left behind with nothing that knows them:\n%s\ndelete them first ('labctl cluster delete NAME'), or pass --cascade to have mgmt down delete them through Cluster API and wait until their VMs are gone",
			name, len(workloads), listClusters(workloads))
	}
	if len(workloads) > 0 {
		fmt.Fprintf(o.IO.Err, "workload clusters to delete first, through Cluster API (with their VMs):\n%s\n", listClusters(workloads))
	}
	fmt.Fprintf(o.IO.Err, "VMs of lab %s on %s:\n", name, drv.Name())
	if unreached != nil {
		fmt.Fprintf(o.IO.Err, "  each VM tagged %s, the management VM %s among them (%s)\n",
			hypervisor.LabTag(name), lab.Management.Name, unreached.NotChecked("which of them exist"))
	}
	for _, v := range vms {
		fmt.Fprintf(o.IO.Err, "  %s\n", describe(v))
	}
	if o.DryRun {
		fmt.Fprintln(o.IO.Err, "dry run: nothing was deleted")
		return nil
	}
	if !o.Yes {
		q := fmt.Sprintf("Stop and delete these %d VM(s) with their disks?", len(vms))
		if len(workloads) > 0 {
			q = fmt.Sprintf("Delete %d workload cluster(s), then stop and delete these %d VM(s) with their disks?", len(workloads), len(vms))
		}
		ok, err := o.IO.Confirm(q, "")
		if err != nil {
			return err
		}
		if !ok {
			return ErrAborted
		}
	}
	// Read before the clusters go: their machines name the VMs to see
	// gone from the hypervisors.
	vmsOfClusters, err := machineVMs(ctx, mc, workloads)
	if err != nil {
		return fmt.Errorf("reading the workload clusters' machines before deleting them (nothing was deleted): %w", err)
	}
	for _, w := range workloads {
		err := cluster.Delete(ctx, cluster.DeleteOptions{Yes: true, Options: cluster.Options{
			IO: o.IO, Lab: lab, Name: w.Name, Mgmt: mc, Timeout: o.Timeout,
		}})
		if err != nil {
			return fmt.Errorf("deleting workload cluster %s before the management VM (nothing of the management VM was deleted): %w", w.Name, err)
		}
	}
	steps := make([]step.Step, 0, len(vms)+1)
	if len(workloads) > 0 {
		steps = append(steps, step.Step{Name: "wait for the workload clusters' VMs to go from the hypervisors", Apply: func(ctx context.Context) error {
			return waitVMsGone(ctx, lab, o.Driver, vmsOfClusters, o.timeout(), func(msg string) { step.Progress(ctx, "%s", msg) })
		}})
	}
	for _, v := range vms {
		steps = append(steps, step.Step{Name: "delete " + describe(v), Apply: func(ctx context.Context) error {
			return drv.DeleteVM(ctx, v)
		}})
	}
	if err := (&step.Runner{IO: o.IO}).Run(ctx, steps); err != nil {
		return err
	}
	if p, err := kube.MgmtKubeconfigPath(name); err == nil {
		if _, err := os.Stat(p); err == nil {
			fmt.Fprintf(o.IO.Err, "%s is kept; it reaches no cluster until the next mgmt up\n", p)
		}
	}
	return nil
}

// workloadClusters lists the Cluster API Clusters on the management
// cluster. With no stored kubeconfig, mgmt up never finished, so no
// cluster can have been made on it.
func workloadClusters(ctx context.Context, o DownOptions, lab *config.Lab) ([]kube.Ref, *kube.Client, error) {
	if o.SkipClusterCheck {
		fmt.Fprintln(o.IO.Err, "not asking the management cluster for workload clusters (--skip-cluster-check): the VMs of any are left behind")
		return nil, nil, nil
	}
	mc, err := o.Mgmt(ctx)
	if errors.Is(err, ErrNoManagement) {
		where := "no kubeconfig stored"
		if p, err := kube.MgmtKubeconfigPath(lab.Metadata.Name); err == nil {
			where = "no kubeconfig at " + p
		}
		fmt.Fprintf(o.IO.Err, "workload clusters: none can exist (%s: mgmt up never finished, so Cluster API never ran)\n", where)
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	list, err := mc.List(ctx, clusterapi.ClusterGVK, "", "")
	if err != nil {
		return nil, nil, fmt.Errorf("asking the management cluster %s for workload clusters before deleting it: %w; if it no longer answers, --skip-cluster-check deletes the VM anyway, leaving any workload cluster's VMs behind", mc.Host(), err)
	}
	var out []kube.Ref
	for _, c := range list {
		if c.GetNamespace() != clusterapi.Namespace(c.GetName()) {
			return nil, nil, fmt.Errorf("refusing to delete the management VM of lab %s: Cluster %s/%s was not made by labctl (it is not in namespace %s); delete it with Cluster API yourself first",
				lab.Metadata.Name, c.GetNamespace(), c.GetName(), clusterapi.Namespace(c.GetName()))
		}
		out = append(out, kube.Ref{GVK: clusterapi.ClusterGVK, Namespace: c.GetNamespace(), Name: c.GetName()})
	}
	if len(out) == 0 {
		fmt.Fprintf(o.IO.Err, "workload clusters: none on the management cluster %s\n", mc.Host())
	}
	return out, mc, nil
}

func listClusters(refs []kube.Ref) string {
	lines := make([]string, len(refs))
	for i, r := range refs {
		lines[i] = "  Cluster " + r.Namespace + "/" + r.Name
	}
	return strings.Join(lines, "\n")
}

func describe(v hypervisor.VM) string {
	s := v.Name
	if v.ID != 0 {
		s += fmt.Sprintf(" (VMID %d on %s)", v.ID, v.Node)
	}
	return s
}

// KubeconfigOptions are the inputs of 'labctl mgmt kubeconfig'.
type KubeconfigOptions struct {
	IO  *ui.IO
	Lab *config.Lab
	// Path, when set, is where to write it (mode 0600); else it is printed.
	Path  string
	Force bool
	// Merge adds it to the user's kubeconfig as context labctl-<lab>-mgmt.
	Merge bool
}

// Kubeconfig prints the stored management kubeconfig or writes it to a file.
func Kubeconfig(ctx context.Context, o KubeconfigOptions) error {
	lab := o.Lab
	data, _, err := storedKubeconfig(lab.Metadata.Name)
	if err != nil {
		return err
	}
	return kube.Export(o.IO.Out, o.IO.Err, data, kube.ExportOptions{
		Write: o.Path, Force: o.Force, Merge: o.Merge, Name: "labctl-" + lab.Metadata.Name + "-mgmt"})
}

// storedKubeconfig reads the management kubeconfig mgmt up stored for
// lab, and says where it is.
func storedKubeconfig(lab string) ([]byte, string, error) {
	src, err := kube.MgmtKubeconfigPath(lab)
	if err != nil {
		return nil, "", err
	}
	data, err := os.ReadFile(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", fmt.Errorf("no kubeconfig stored for lab %s at %s: run 'labctl mgmt up'", lab, src)
	}
	if err != nil {
		return nil, "", fmt.Errorf("reading the stored kubeconfig: %w", err)
	}
	return data, src, nil
}
