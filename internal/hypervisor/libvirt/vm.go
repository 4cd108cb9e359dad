package libvirt

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"

	lv "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/common"
)

var (
	vmNameRe = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	uuidRe   = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

// formatUUID writes a domain UUID as libvirt shows it.
func formatUUID(u lv.UUID) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// FindVM returns labctl's VM of this lab with the given name, or
// ErrNotFound. A domain of that name that labctl did not make, or that
// belongs to another lab, is an error: labctl will not take it over.
func (d *Driver) FindVM(ctx context.Context, lab, name string) (hypervisor.VM, error) {
	if err := ctx.Err(); err != nil {
		return hypervisor.VM{}, err
	}
	dom, err := d.l.DomainLookupByName(name)
	if isCode(err, lv.ErrNoDomain) {
		return hypervisor.VM{}, fmt.Errorf("VM %s on %s: %w", name, d.opts.Name, hypervisor.ErrNotFound)
	}
	if err != nil {
		return hypervisor.VM{}, fmt.Errorf("looking up VM %s: %w", name, err)
	}
	vm, meta, err := d.vmOf(dom)
	if err != nil {
		return hypervisor.VM{}, err
	}
	if meta == nil {
		return hypervisor.VM{}, fmt.Errorf("a VM named %s exists on %s but labctl did not create it (no labctl metadata); rename it or pick another name in lab.yaml", name, d.opts.Name)
	}
	if meta.Lab != lab {
		return hypervisor.VM{}, fmt.Errorf("VM %s on %s belongs to lab %q, not %q; pick another name in lab.yaml", name, d.opts.Name, meta.Lab, lab)
	}
	return vm, nil
}

// vmOf reads a domain; meta is nil when labctl did not make it.
func (d *Driver) vmOf(dom lv.Domain) (hypervisor.VM, *vmMeta, error) {
	name := dom.Name
	raw, err := d.l.DomainGetMetadata(dom, int32(lv.DomainMetadataElement), lv.OptString{MetadataNS}, lv.DomainAffectConfig)
	if isCode(err, lv.ErrNoDomainMetadata) {
		return hypervisor.VM{Name: name}, nil, nil
	}
	if err != nil {
		return hypervisor.VM{}, nil, fmt.Errorf("reading the metadata of VM %s: %w", name, err)
	}
	meta, err := parseMeta(raw)
	if err != nil {
		return hypervisor.VM{}, nil, fmt.Errorf("VM %s: %w", name, err)
	}
	_, maxMemKiB, _, vcpus, _, err := d.l.DomainGetInfo(dom)
	if err != nil {
		return hypervisor.VM{}, nil, fmt.Errorf("reading the state of VM %s: %w", name, err)
	}
	running, err := d.l.DomainIsActive(dom)
	if err != nil {
		return hypervisor.VM{}, nil, fmt.Errorf("reading the state of VM %s: %w", name, err)
	}
	return hypervisor.VM{
		Name:      name,
		Lab:       meta.Lab,
		UUID:      formatUUID(dom.UUID),
		Running:   running == 1,
		CPUs:      int(vcpus),
		MemoryMiB: int(maxMemKiB / 1024),
		Tags:      meta.Tags,
	}, &meta, nil
}

// CreateVM makes the VM's disk (a qcow2 overlay of the image), uploads its
// NoCloud seed, and defines the domain last, so a defined domain is always
// complete. A VM that exists already is returned as it is. On failure or
// cancellation the volumes made so far are removed; a re-run starts clean.
func (d *Driver) CreateVM(ctx context.Context, spec hypervisor.VMSpec) (vm hypervisor.VM, err error) {
	if spec.Network.Network == "" && spec.Network.Bridge == "" {
		spec.Network.Network, spec.Network.Bridge = d.opts.Network, d.opts.Bridge
	}
	if err := checkSpec(spec); err != nil {
		return hypervisor.VM{}, err
	}
	if vm, err := d.FindVM(ctx, spec.Lab, spec.Name); err == nil || !errors.Is(err, hypervisor.ErrNotFound) {
		return vm, err
	}
	guest, err := d.pickGuest()
	if err != nil {
		return hypervisor.VM{}, err
	}
	p, err := d.pool()
	if err != nil {
		return hypervisor.VM{}, err
	}

	disk, seed := diskVolume(spec.Name), seedVolume(spec.Name)
	var data []string
	for i := range spec.ExtraDisksGiB {
		data = append(data, dataVolume(spec.Name, i+1))
	}
	volumes := append(append([]string{disk}, data...), seed)
	defined := false
	defer func() {
		if defined {
			return
		}
		// Runs after cancellation too: libvirt calls do not take ctx.
		var errs []error
		for _, v := range volumes {
			errs = append(errs, d.deleteVolume(p, v))
		}
		if cerr := errors.Join(errs...); cerr != nil {
			err = errors.Join(err, fmt.Errorf("cleaning up after the failed create of %s: %w", spec.Name, cerr))
		}
	}()

	if err := d.createOverlay(ctx, p, disk, spec); err != nil {
		return hypervisor.VM{}, err
	}
	d.reached("disk created")
	for i, name := range data {
		if err := d.createDataDisk(ctx, p, name, spec.ExtraDisksGiB[i]); err != nil {
			return hypervisor.VM{}, fmt.Errorf("VM %s: %w", spec.Name, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return hypervisor.VM{}, err
	}
	iso, err := common.SeedISO(spec.Name, spec.CloudInit)
	if err != nil {
		return hypervisor.VM{}, err
	}
	if err := d.uploadBytes(ctx, p, seed, iso); err != nil {
		return hypervisor.VM{}, fmt.Errorf("VM %s: cloud-init seed: %w", spec.Name, err)
	}
	d.reached("seed uploaded")
	if err := ctx.Err(); err != nil {
		return hypervisor.VM{}, err
	}

	tags := append([]string{hypervisor.Tag, hypervisor.LabTag(spec.Lab)}, spec.Tags...)
	xml, err := domainXML(domainInput{
		Spec: spec, Guest: guest, Pool: d.opts.Pool, Disk: disk, Data: data, Seed: seed,
		ConsoleLog: d.opts.consoleLog(spec.Name),
		Meta:       vmMeta{Lab: spec.Lab, Tags: tags, Volumes: volumes},
	})
	if err != nil {
		return hypervisor.VM{}, err
	}
	dom, err := d.l.DomainDefineXMLFlags(xml, lv.DomainDefineValidate)
	if err != nil {
		return hypervisor.VM{}, fmt.Errorf("defining VM %s: %w", spec.Name, err)
	}
	defined = true
	d.reached("defined")
	vm, _, err = d.vmOf(dom)
	return vm, err
}

func checkSpec(s hypervisor.VMSpec) error {
	var errs []error
	if !vmNameRe.MatchString(s.Name) {
		errs = append(errs, fmt.Errorf("name %q must be a DNS label", s.Name))
	}
	if s.Lab == "" {
		errs = append(errs, errors.New("no lab"))
	}
	if s.CPUs < 1 || s.MemoryMiB < 128 || s.DiskGiB < 1 {
		errs = append(errs, fmt.Errorf("size %d CPUs, %d MiB, %d GiB is too small", s.CPUs, s.MemoryMiB, s.DiskGiB))
	}
	if s.Image.Volume == "" {
		errs = append(errs, errors.New("no image volume (run EnsureImage first)"))
	}
	if len(s.CloudInit.UserData) == 0 {
		errs = append(errs, errors.New("no cloud-init user-data"))
	}
	if s.UUID != "" && !uuidRe.MatchString(s.UUID) {
		errs = append(errs, fmt.Errorf("UUID %q is not lowercase 8-4-4-4-12 hex", s.UUID))
	}
	for _, g := range s.ExtraDisksGiB {
		if g < 1 {
			errs = append(errs, fmt.Errorf("extra disk of %d GiB is too small", g))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("VM spec %s: %w", s.Name, errors.Join(errs...))
	}
	return nil
}

// createOverlay makes the VM's disk: a qcow2 volume of DiskGiB backed by
// the image. A leftover of an interrupted create is replaced.
func (d *Driver) createOverlay(ctx context.Context, p lv.StoragePool, name string, spec hypervisor.VMSpec) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := d.deleteVolume(p, name); err != nil {
		return err
	}
	backing, err := d.l.StorageVolLookupByPath(spec.Image.Volume)
	if err != nil {
		return fmt.Errorf("VM %s: looking up its image %s: %w", spec.Name, spec.Image.Volume, err)
	}
	bx, err := d.l.StorageVolGetXMLDesc(backing, 0)
	if err != nil {
		return fmt.Errorf("VM %s: reading image volume %s: %w", spec.Name, spec.Image.Volume, err)
	}
	var bv libvirtxml.StorageVolume
	if err := bv.Unmarshal(bx); err != nil {
		return fmt.Errorf("VM %s: reading image volume %s: %w", spec.Name, spec.Image.Volume, err)
	}
	format := "raw"
	if bv.Target != nil && bv.Target.Format != nil && bv.Target.Format.Type != "" {
		format = bv.Target.Format.Type
	}
	capacity := uint64(spec.DiskGiB) << 30
	if bv.Capacity != nil && capacity < bv.Capacity.Value {
		return fmt.Errorf("VM %s: disk %d GiB is smaller than its image (%d bytes); raise the disk size", spec.Name, spec.DiskGiB, bv.Capacity.Value)
	}
	xml, err := volumeXML(name, "qcow2", capacity, spec.Image.Volume, format)
	if err != nil {
		return err
	}
	if _, err := d.l.StorageVolCreateXML(p, xml, 0); err != nil {
		return fmt.Errorf("VM %s: creating disk %s: %w", spec.Name, name, err)
	}
	return nil
}

// createDataDisk makes an empty qcow2 data disk, replacing a leftover of
// an interrupted create.
func (d *Driver) createDataDisk(ctx context.Context, p lv.StoragePool, name string, sizeGiB int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := d.deleteVolume(p, name); err != nil {
		return err
	}
	xml, err := volumeXML(name, "qcow2", uint64(sizeGiB)<<30, "", "")
	if err != nil {
		return err
	}
	if _, err := d.l.StorageVolCreateXML(p, xml, 0); err != nil {
		return fmt.Errorf("creating data disk %s: %w", name, err)
	}
	return nil
}

// pickGuest chooses the domain type, arch and machine from the host's
// capabilities: x86_64 on q35 where offered; kvm when the host offers it
// and its CPU has vmx or svm, else qemu (TCG), else the first type
// offered (the test driver's "test"). Options.DomainType overrides the
// type.
func (d *Driver) pickGuest() (guestProfile, error) {
	d.guestOnce.Do(func() {
		raw, err := d.l.ConnectGetCapabilities()
		if err != nil {
			d.guestErr = fmt.Errorf("reading the capabilities of %s: %w", d.opts.Name, err)
			return
		}
		var caps libvirtxml.Caps
		if err := caps.Unmarshal(raw); err != nil {
			d.guestErr = fmt.Errorf("reading the capabilities of %s: %w", d.opts.Name, err)
			return
		}
		d.guest, err = guestFrom(&caps, d.opts.DomainType)
		if err != nil {
			d.guestErr = fmt.Errorf("hypervisor %s: %w", d.opts.Name, err)
		}
	})
	return d.guest, d.guestErr
}

// DomainType is the domain type VMs get on this host (kvm, qemu, ...).
func (d *Driver) DomainType() (string, error) {
	g, err := d.pickGuest()
	return g.Type, err
}

// StartVM starts the VM; a running VM is left alone.
func (d *Driver) StartVM(ctx context.Context, vm hypervisor.VM) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dom, err := d.l.DomainLookupByName(vm.Name)
	if err != nil {
		return fmt.Errorf("looking up VM %s: %w", vm.Name, err)
	}
	on, err := d.l.DomainIsActive(dom)
	if err != nil {
		return fmt.Errorf("reading the state of VM %s: %w", vm.Name, err)
	}
	if on == 1 {
		return nil
	}
	if err := d.l.DomainCreate(dom); err != nil && !isCode(err, lv.ErrOperationInvalid) {
		return fmt.Errorf("starting VM %s: %w", vm.Name, err)
	}
	return nil
}

// DeleteVM destroys the VM, undefines it and removes the volumes labctl
// made for it. A VM that is already gone is not an error; one labctl did
// not make, or of another lab, is refused.
func (d *Driver) DeleteVM(ctx context.Context, vm hypervisor.VM) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dom, err := d.l.DomainLookupByName(vm.Name)
	if isCode(err, lv.ErrNoDomain) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("looking up VM %s: %w", vm.Name, err)
	}
	_, meta, err := d.vmOf(dom)
	if err != nil {
		return err
	}
	if meta == nil {
		return fmt.Errorf("refusing to delete VM %s on %s: labctl did not create it", vm.Name, d.opts.Name)
	}
	if vm.Lab != "" && meta.Lab != vm.Lab {
		return fmt.Errorf("refusing to delete VM %s on %s: it belongs to lab %q, not %q", vm.Name, d.opts.Name, meta.Lab, vm.Lab)
	}
	if on, _ := d.l.DomainIsActive(dom); on == 1 {
		if err := d.l.DomainDestroy(dom); err != nil && !isCode(err, lv.ErrOperationInvalid) {
			return fmt.Errorf("stopping VM %s: %w", vm.Name, err)
		}
	}
	// The volumes go before the domain: the domain's metadata is the
	// record of them, so a delete cut off half way (the provider killed
	// between two calls) finds the domain again and finishes; undefined
	// first, its volumes would be left behind, known to nothing.
	if len(meta.Volumes) > 0 {
		p, err := d.pool()
		if err != nil {
			return fmt.Errorf("deleting the volumes %v of VM %s: %w", meta.Volumes, vm.Name, err)
		}
		var errs []error
		for _, v := range meta.Volumes {
			errs = append(errs, d.deleteVolume(p, v))
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("deleting the volumes of VM %s: %w", vm.Name, err)
		}
	}
	// labctl's VMs boot by BIOS (no NVRAM) and have no checkpoints.
	flags := lv.DomainUndefineManagedSave | lv.DomainUndefineSnapshotsMetadata
	if err := d.l.DomainUndefineFlags(dom, flags); err != nil {
		return fmt.Errorf("undefining VM %s: %w", vm.Name, err)
	}
	return nil
}

// RemoveLeftovers removes what a CreateVM of VM name cut off before its
// domain was defined left in the pool: the volumes it names
// <name>-disk<n>.qcow2 and <name>-seed.iso. While a domain of that name
// exists on the host, whoever made it, nothing is touched: the volumes
// are its own.
func (d *Driver) RemoveLeftovers(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !vmNameRe.MatchString(name) {
		return fmt.Errorf("removing the leftovers of VM %q: the name is not a DNS label", name)
	}
	if _, err := d.l.DomainLookupByName(name); err == nil {
		return nil
	} else if !isCode(err, lv.ErrNoDomain) {
		return fmt.Errorf("looking up VM %s: %w", name, err)
	}
	p, err := d.pool()
	if errors.Is(err, hypervisor.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	names, err := d.volumeNames(p)
	if err != nil {
		return err
	}
	own := regexp.MustCompile(`^` + regexp.QuoteMeta(name) + `-(disk[0-9]+\.qcow2|seed\.iso)$`)
	var errs []error
	for _, v := range names {
		if own.MatchString(v) {
			errs = append(errs, d.deleteVolume(p, v))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("removing the leftovers of VM %s: %w", name, err)
	}
	return nil
}

// ListVMs lists the domains carrying labctl's metadata, of one lab or all.
func (d *Driver) ListVMs(ctx context.Context, lab string) ([]hypervisor.VM, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	doms, _, err := d.l.ConnectListAllDomains(1, 0)
	if err != nil {
		return nil, fmt.Errorf("listing VMs on %s: %w", d.opts.Name, err)
	}
	var vms []hypervisor.VM
	for _, dom := range doms {
		vm, meta, err := d.vmOf(dom)
		if isCode(err, lv.ErrNoDomain) {
			continue // deleted while listing
		}
		if err != nil {
			return nil, err
		}
		if meta != nil && (lab == "" || meta.Lab == lab) {
			vms = append(vms, vm)
		}
	}
	slices.SortFunc(vms, func(a, b hypervisor.VM) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return vms, nil
}
