package hypervisor

import "context"

// Kinds of Volume.
const (
	// VolumeSeed is a VM's NoCloud seed ISO.
	VolumeSeed = "seed-iso"
	// VolumeDisk is a VM's disk.
	VolumeDisk = "volume"
	// VolumeImage is a node image 'labctl image build' uploaded into a
	// libvirt pool, which VM disks are qcow2 overlays on.
	VolumeImage = "image"
)

// Volume is storage labctl made on a host for a VM (its disk or its
// NoCloud seed) or a node image it uploaded. The driver names it as the host does and says which VM
// uses it; whether that makes it an orphan is internal/orphans' rule.
type Volume struct {
	Kind    string // VolumeSeed or VolumeDisk
	Node    string // Proxmox node; "" on libvirt
	Storage string // Proxmox storage or libvirt pool
	Name    string // Proxmox volume ID; libvirt volume name
	// VM is the name of the VM the volume was made for, as its name
	// says (libvirt <vm>-disk0.qcow2, Proxmox labctl-<lab>-<vm>-<hash>.iso).
	VM string
	// VMID is the Proxmox VM id a disk volume is owned by; 0 otherwise.
	VMID int
	// UsedBy names the VM that uses the volume now (attaches it, lists it
	// in its metadata, or, on libvirt, carries the name the volume was
	// made for), or, for a node image, the disk backed by it; "" when
	// none does.
	UsedBy string
	Bytes  int64
}

// Leftovers is implemented by drivers that can list and remove the
// volumes labctl made for VMs, beside the VMs (internal/orphans).
type Leftovers interface {
	// LabVolumes lists the volumes labctl made for VMs of lab on the host,
	// with the VM using each. It only reads.
	LabVolumes(ctx context.Context, lab string) ([]Volume, error)
	// DeleteVolume removes v, after checking again that no VM uses it.
	DeleteVolume(ctx context.Context, v Volume) error
}
