// Package orphans is the one place that decides what labctl made on the
// lab's hypervisors that nothing owns any more: VMs no Machine names,
// volumes and seed ISOs no VM uses, node templates and node image
// volumes no cluster uses.
// 'labctl gc' deletes what Find returns; 'labctl status' shows it.
//
// The marks it goes by are those docs/day2.md tabulates. Without a
// management cluster it offers only what is provably labctl's and
// unowned without one: no node VM, template or node image (only Cluster API's
// objects say which are owned, and a lab whose management VM was lost is
// restored onto a new one with its VMs adopted), but the volumes and
// seed ISOs labctl's names mark and no VM uses, and lab-tagged VMs
// labctl itself made that are not the management VM.
package orphans

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/kube"
)

// Kinds of Orphan.
const (
	KindVM       = "vm"
	KindVolume   = hypervisor.VolumeDisk
	KindSeedISO  = hypervisor.VolumeSeed
	KindTemplate = "template"
	// KindImage is a node image volume on a libvirt host.
	KindImage = hypervisor.VolumeImage
)

// Orphan is one thing on a hypervisor that labctl made and nothing owns.
type Orphan struct {
	Hypervisor string `json:"hypervisor"` // lab.yaml name
	Kind       string `json:"kind"`       // "vm", "volume", "seed-iso", "template", "image"
	Name       string `json:"name"`
	Node       string `json:"node,omitempty"` // Proxmox node; "" on libvirt
	ID         int    `json:"id,omitempty"`   // Proxmox VMID; 0 on libvirt
	Running    bool   `json:"running"`
	// MemoryMiB is what CAPMOX counts against the node: the configured
	// memory of every VM, stopped ones too; 0 for volumes and templates.
	MemoryMiB int `json:"memoryMiB"`
	// Reason is one line a user understands: the marks that make it
	// labctl's and why nothing owns it.
	Reason string `json:"reason"`

	// What Delete removes.
	vm    hypervisor.VM
	clone bool // a CAPMOX clone (no lab tag), not a VM labctl made
	vol   hypervisor.Volume
}

// DriverFunc opens the driver of the lab's hypervisor called name.
type DriverFunc func(ctx context.Context, name string) (hypervisor.Driver, error)

// Input is what Find reads.
type Input struct {
	Lab    *config.Lab
	Driver DriverFunc
	// Mgmt is the management cluster; nil means the lab has none, and
	// then only what is provably unowned without one is offered. A
	// management cluster that exists but does not answer is an error of
	// Find's: pass nil only when there is none.
	Mgmt *kube.Client
	// HostTimeout bounds the reading of each hypervisor; 0 is 10 s.
	HostTimeout time.Duration
}

// DefaultHostTimeout bounds the reading of one hypervisor.
const DefaultHostTimeout = 10 * time.Second

// HostError is a hypervisor Find could not read; the others were read.
type HostError struct {
	Hypervisor string
	// Field is the lab.yaml field that says where the host is.
	Field string
	Err   error
}

func (e *HostError) Error() string {
	return fmt.Sprintf("hypervisor %s (%s): %v", e.Hypervisor, e.Field, e.Err)
}

func (e *HostError) Unwrap() error { return e.Err }

// UnreachableError lists the hypervisors Find could not read. Find
// returns it beside what it found on the others.
type UnreachableError struct{ Hosts []*HostError }

func (e *UnreachableError) Error() string {
	lines := make([]string, len(e.Hosts))
	for i, h := range e.Hosts {
		lines[i] = h.Error()
	}
	return fmt.Sprintf("%d hypervisor(s) could not be read, so their orphans are not listed: %s", len(e.Hosts), strings.Join(lines, "; "))
}

// hostField is the lab.yaml field naming where hypervisor h is.
func hostField(h *config.Hypervisor) string {
	if h.Libvirt != nil {
		return fmt.Sprintf("hypervisors[%s].libvirt.uri", h.Name)
	}
	return fmt.Sprintf("hypervisors[%s].proxmox.url", h.Name)
}

// hostState is what one hypervisor holds.
type hostState struct {
	vms  []hypervisor.VM // every VM (Proxmox, templates too) or every labctl domain (libvirt)
	vols []hypervisor.Volume
}

// inventory is implemented by drivers that list every VM, labctl's or
// not, templates included (Proxmox: CAPMOX's clones carry no lab tag).
type inventory interface {
	Inventory(ctx context.Context) ([]hypervisor.NodeCapacity, []hypervisor.VM, error)
}

// Find reads every hypervisor of the lab in parallel, each within
// HostTimeout, and the management cluster's machines, and returns the
// orphans, ordered by hypervisor, kind and name. Hypervisors that could
// not be read are returned as an *UnreachableError with the orphans of
// the others.
func Find(ctx context.Context, in Input) ([]Orphan, error) {
	own, err := readOwners(ctx, in.Mgmt)
	if err != nil {
		return nil, err
	}
	timeout := in.HostTimeout
	if timeout <= 0 {
		timeout = DefaultHostTimeout
	}
	hosts := in.Lab.Hypervisors
	states := make([]*hostState, len(hosts))
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i := range hosts {
		wg.Go(func() {
			states[i], errs[i] = readHost(ctx, in.Driver, hosts[i].Name, in.Lab.Metadata.Name, timeout)
		})
	}
	wg.Wait()
	var out []Orphan
	var bad []*HostError
	for i := range hosts {
		h := &hosts[i]
		if errs[i] != nil {
			bad = append(bad, &HostError{Hypervisor: h.Name, Field: hostField(h), Err: errs[i]})
			continue
		}
		out = append(out, classify(in.Lab, h, states[i], own)...)
	}
	slices.SortStableFunc(out, func(a, b Orphan) int {
		return strings.Compare(a.Hypervisor+"\x00"+a.Kind+"\x00"+a.Name, b.Hypervisor+"\x00"+b.Kind+"\x00"+b.Name)
	})
	if len(bad) > 0 {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		return out, &UnreachableError{Hosts: bad}
	}
	return out, nil
}

// readHost reads one hypervisor within timeout. A driver that does not
// return in time is left to finish on its own: a dead host never holds
// up the others.
func readHost(ctx context.Context, open DriverFunc, name, lab string, timeout time.Duration) (*hostState, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		s   *hostState
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := read(ctx, open, name, lab)
		done <- result{s, err}
	}()
	select {
	case r := <-done:
		return r.s, r.err
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("no answer within %s", timeout)
		}
		return nil, ctx.Err()
	}
}

func read(ctx context.Context, open DriverFunc, name, lab string) (*hostState, error) {
	drv, err := open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer func() { _ = drivers.Close(drv) }()
	// The one explained error for a dead API, as every command gives it.
	if c, ok := drv.(hypervisor.Connector); ok {
		if _, err := c.Connect(ctx); err != nil {
			return nil, err
		}
	}
	s := &hostState{}
	if inv, ok := drv.(inventory); ok {
		_, s.vms, err = inv.Inventory(ctx)
	} else {
		s.vms, err = drv.ListVMs(ctx, "")
	}
	if err != nil {
		return nil, err
	}
	if lo, ok := drv.(hypervisor.Leftovers); ok {
		// The pool or storage not made yet holds nothing.
		if s.vols, err = lo.LabVolumes(ctx, lab); err != nil && !errors.Is(err, hypervisor.ErrNotFound) {
			return nil, err
		}
	}
	return s, nil
}
