package orphans

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/ui"
)

// ErrAborted means the user answered no; nothing was deleted.
var ErrAborted = errors.New("aborted: nothing was deleted")

// Options are the inputs of 'labctl gc'.
type Options struct {
	IO     *ui.IO
	Lab    *config.Lab
	Driver DriverFunc
	// Mgmt reaches the lab's management cluster; an error wrapping
	// kube.ErrNoMgmt means there is none.
	Mgmt func(ctx context.Context) (*kube.Client, error)
	// DryRun only lists; Yes deletes without asking; Force stops and
	// deletes running VMs too.
	DryRun, Yes, Force bool
	// Output is text, json or yaml: the list's format.
	Output      string
	HostTimeout time.Duration
}

// GC lists the orphans with their reasons, asks, and deletes them, one
// by one: a failure is reported and the others still go. A running VM
// is kept without Force. Hypervisors that cannot be read are named with
// the lab.yaml field that says where they are; the others proceed, and
// GC returns an error naming them at the end.
func GC(ctx context.Context, o Options) error {
	mc, err := o.Mgmt(ctx)
	switch {
	case errors.Is(err, kube.ErrNoMgmt):
		mc = nil
		fmt.Fprintf(o.IO.Err, "lab %s has no management cluster: listing only what labctl's own marks prove unowned (no node VM, template or node image; docs/day2.md)\n", o.Lab.Metadata.Name)
	case err != nil:
		return fmt.Errorf("reaching the management cluster, whose Machines say which VMs are owned (nothing was deleted): %w", err)
	}
	status := o.IO.NewStatus()
	status.Start("read the hypervisors and the management cluster")
	found, err := Find(ctx, Input{Lab: o.Lab, Driver: o.Driver, Mgmt: mc, HostTimeout: o.HostTimeout})
	var unreachable *UnreachableError
	switch {
	case errors.As(err, &unreachable):
		status.Warn(fmt.Sprintf("%d of %d hypervisor(s) not read", len(unreachable.Hosts), len(o.Lab.Hypervisors)))
		for _, h := range unreachable.Hosts {
			fmt.Fprintf(o.IO.Err, "cannot read %s; check it, then run gc again\n", h.Error())
		}
	case err != nil:
		status.End(false)
		return err
	default:
		status.OK(fmt.Sprintf("%d orphan(s)", len(found)))
	}
	if found == nil {
		found = []Orphan{}
	}
	if err := o.IO.Print(o.Output, found, func(w io.Writer) error { return table(o.IO, w, found, o.Force) }); err != nil {
		return err
	}
	left := unreadable(unreachable)
	if len(found) == 0 || o.DryRun {
		if o.DryRun && len(found) > 0 {
			fmt.Fprintln(o.IO.Err, "dry run: nothing was deleted")
		}
		return left
	}
	todo, kept := deletable(found, o.Force)
	tellKept := func() {
		for _, k := range kept {
			fmt.Fprintf(o.IO.Err, "kept %s: it runs; pass --force to stop and delete it\n", describe(k))
		}
	}
	if len(todo) == 0 {
		tellKept()
		return left
	}
	if !o.Yes {
		q := fmt.Sprintf("Delete these %d orphan(s)?", len(todo))
		if len(kept) > 0 {
			q = fmt.Sprintf("Delete %d orphan(s), keeping the %d running VM(s) (--force deletes them)?", len(todo), len(kept))
		}
		ok, err := o.IO.Confirm(q, "")
		if err != nil {
			return err
		}
		if !ok {
			return ErrAborted
		}
	}
	errs := remove(ctx, o, todo)
	tellKept()
	if left != nil {
		errs = append(errs, left)
	}
	if len(errs) > 0 {
		return fmt.Errorf("gc did not finish; run it again once fixed: %w", errors.Join(errs...))
	}
	return nil
}

func unreadable(u *UnreachableError) error {
	if u == nil {
		return nil
	}
	return u
}

// deletable splits the orphans into those gc deletes and the running VMs
// it keeps without force.
func deletable(found []Orphan, force bool) (todo, kept []Orphan) {
	for _, o := range found {
		if o.Kind == KindVM && o.Running && !force {
			kept = append(kept, o)
			continue
		}
		todo = append(todo, o)
	}
	return todo, kept
}

func describe(o Orphan) string {
	s := o.Kind + " " + o.Name
	if o.ID != 0 {
		s += fmt.Sprintf(" (VMID %d on %s)", o.ID, o.Node)
	}
	return s + " on " + o.Hypervisor
}

func table(s *ui.IO, w io.Writer, found []Orphan, force bool) error {
	if len(found) == 0 {
		_, err := fmt.Fprintln(w, "no orphans")
		return err
	}
	rows := make([][]string, 0, len(found))
	for _, o := range found {
		name := o.Name
		if o.ID != 0 {
			name += fmt.Sprintf(" (VMID %d on %s)", o.ID, o.Node)
		}
		why := o.Reason
		if o.Kind == KindVM && o.Running && !force {
			why += "; kept without --force"
		}
		rows = append(rows, []string{o.Hypervisor, o.Kind, name, why})
	}
	return s.Table(w, []string{"HYPERVISOR", "KIND", "NAME", "REASON"}, rows)
}

// remove deletes each orphan, one driver per hypervisor, with a line of
// progress each.
func remove(ctx context.Context, o Options, todo []Orphan) []error {
	open := map[string]hypervisor.Driver{}
	defer func() {
		for _, d := range open {
			_ = drivers.Close(d)
		}
	}()
	status := o.IO.NewStatus()
	var errs []error
	for _, x := range todo {
		status.Start("delete " + describe(x))
		err := ctx.Err()
		if err == nil {
			drv := open[x.Hypervisor]
			if drv == nil {
				if drv, err = o.Driver(ctx, x.Hypervisor); err == nil {
					open[x.Hypervisor] = drv
				}
			}
			if err == nil {
				err = Delete(ctx, drv, o.Lab.Metadata.Name, x)
			}
		}
		if err != nil {
			status.End(false)
			errs = append(errs, fmt.Errorf("deleting %s: %w", describe(x), err))
			continue
		}
		status.End(true)
	}
	return errs
}

type cloneDeleter interface {
	DeleteClone(ctx context.Context, vm hypervisor.VM) error
}

type templateDeleter interface {
	DeleteTemplate(ctx context.Context, vm hypervisor.VM) error
}

// Delete removes one orphan Find returned, through drv, the driver of
// its hypervisor. The driver reads it again first and refuses one that
// changed (a VMID reused, a volume attached since).
func Delete(ctx context.Context, drv hypervisor.Driver, lab string, x Orphan) error {
	switch x.Kind {
	case KindVM:
		if !x.clone {
			vm := x.vm
			if vm.Lab == "" {
				vm.Lab = lab
			}
			return drv.DeleteVM(ctx, vm)
		}
		if d, ok := drv.(cloneDeleter); ok {
			return d.DeleteClone(ctx, x.vm)
		}
	case KindTemplate:
		if d, ok := drv.(templateDeleter); ok {
			return d.DeleteTemplate(ctx, x.vm)
		}
	case KindVolume, KindSeedISO, KindImage:
		if d, ok := drv.(hypervisor.Leftovers); ok {
			return d.DeleteVolume(ctx, x.vol)
		}
	}
	return fmt.Errorf("the %s driver cannot delete a %s", drv.Name(), strings.ToLower(x.Kind))
}
