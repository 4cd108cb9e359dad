package mgmt

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/step"
	"github.com/labctl/labctl/internal/ui"
)

// ErrAborted means the user answered no; nothing was changed.
var ErrAborted = errors.New("aborted: nothing was deleted")

// DownOptions are the inputs of 'labctl mgmt down'.
type DownOptions struct {
	IO      *ui.IO
	Request config.Request
	DryRun  bool
	// Yes skips the question.
	Yes  bool
	Open OpenFunc
}

// Down deletes the VMs labctl made for this lab on the management
// hypervisor: stop, wait, delete with their disks. VMs without labctl's
// tags for this lab are never listed, so never touched.
func Down(ctx context.Context, o DownOptions) error {
	lab, _, err := config.Load(ctx, o.Request)
	if err != nil {
		return err
	}
	open := o.Open
	if open == nil {
		open = drivers.Open
	}
	drv, err := open(ctx, lab, lab.Management.Hypervisor)
	if err != nil {
		return err
	}
	defer func() { _ = drivers.Close(drv) }()
	name := lab.Metadata.Name
	vms, err := drv.ListVMs(ctx, name)
	if err != nil {
		return fmt.Errorf("listing the VMs of lab %s on %s: %w", name, drv.Name(), err)
	}
	if len(vms) == 0 {
		fmt.Fprintf(o.IO.Err, "no VM of lab %s on %s: nothing to delete\n", name, drv.Name())
		return nil
	}
	fmt.Fprintf(o.IO.Err, "VMs of lab %s on %s:\n", name, drv.Name())
	for _, v := range vms {
		fmt.Fprintf(o.IO.Err, "  %s\n", describe(v))
	}
	if o.DryRun {
		fmt.Fprintln(o.IO.Err, "dry run: nothing was deleted")
		return nil
	}
	if !o.Yes {
		fmt.Fprintf(o.IO.Err, "Stop and delete these %d VM(s) with their disks? [y/N] ", len(vms))
		answer, _ := bufio.NewReader(o.IO.In).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
			return ErrAborted
		}
	}
	steps := make([]step.Step, 0, len(vms))
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

func describe(v hypervisor.VM) string {
	s := v.Name
	if v.ID != 0 {
		s += fmt.Sprintf(" (VMID %d on %s)", v.ID, v.Node)
	}
	return s
}

// KubeconfigOptions are the inputs of 'labctl mgmt kubeconfig'.
type KubeconfigOptions struct {
	IO      *ui.IO
	Request config.Request
	// Path, when set, is where to write it (mode 0600); else it is printed.
	Path  string
	Force bool
}

// Kubeconfig prints the stored management kubeconfig or writes it to a file.
func Kubeconfig(ctx context.Context, o KubeconfigOptions) error {
	lab, _, err := config.Load(ctx, o.Request)
	if err != nil {
		return err
	}
	src, err := kube.MgmtKubeconfigPath(lab.Metadata.Name)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(src)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no kubeconfig stored for lab %s at %s: run 'labctl mgmt up'", lab.Metadata.Name, src)
	}
	if err != nil {
		return fmt.Errorf("reading the stored kubeconfig: %w", err)
	}
	if o.Path == "" {
		_, err := o.IO.Out.Write(data)
		return err
	}
	if _, err := os.Stat(o.Path); err == nil && !o.Force {
		return fmt.Errorf("%s exists: pass --force to overwrite it", o.Path)
	}
	if err := kube.WritePrivate(o.Path, data); err != nil {
		return err
	}
	fmt.Fprintf(o.IO.Err, "wrote %s (mode 0600)\n", o.Path)
	return nil
}
