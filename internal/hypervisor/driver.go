// Package hypervisor is the one interface labctl drives VMs through, with
// Proxmox VE and libvirt implementations in its subpackages. Use cases know
// only this package, as kind's create flow knows only its Provider.
package hypervisor

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"
)

// Tag marks every VM labctl creates; LabTag(lab) marks the lab it belongs to.
const Tag = "labctl"

// LabTag is the tag (Proxmox) or metadata value (libvirt) naming a VM's lab.
func LabTag(lab string) string { return "labctl-lab-" + lab }

// ImageTag is the tag (Proxmox) or metadata value (libvirt) of a node
// image template that 'labctl image build' made from images[].name.
func ImageTag(image string) string { return "labctl-image-" + image }

// ErrNotFound is returned when a VM or image does not exist.
var ErrNotFound = errors.New("not found")

// ChecksumListError is an image's SHA256SUMS file (checksumURL) that
// could not be fetched. Without it labctl cannot name the image file, so
// it cannot tell whether a hypervisor holds it already; a plan goes on
// and says so, where an apply stops.
type ChecksumListError struct{ Err error }

func (e *ChecksumListError) Error() string { return e.Err.Error() }

func (e *ChecksumListError) Unwrap() error { return e.Err }

// Unreachable is a hypervisor's API that a driver did not reach at all:
// the connection was refused, had no route, the name did not resolve, or
// nothing answered. A dry run goes on without what it would have read and
// says so; a refusal once reached (the token, the certificate) is not this,
// as the user must fix it before any run.
type Unreachable struct {
	// API names it, e.g. "the Proxmox API at https://pve:8006".
	API string
	// Field is the lab.yaml field that points at it.
	Field string
	// Reason is what happened, e.g. "the connection was refused".
	Reason string
	// Fix says what to check.
	Fix string
}

// Line is the whole report, without the fix: "<API> (<field>) is
// unreachable: <reason>".
func (u Unreachable) Line() string {
	return fmt.Sprintf("%s (%s) is unreachable: %s", u.API, u.Field, u.Reason)
}

// NotChecked is the line for a check a dry run could not make: "not
// checked: <what>: <API> is unreachable".
func (u Unreachable) NotChecked(what string) string {
	return fmt.Sprintf("not checked: %s: %s is unreachable", what, u.API)
}

// UnreachableOf finds in err a driver's report that it never reached its
// hypervisor's API.
func UnreachableOf(err error) (Unreachable, bool) {
	var r interface{ Unreachable() (Unreachable, bool) }
	if !errors.As(err, &r) {
		return Unreachable{}, false
	}
	return r.Unreachable()
}

// HostPreparer is implemented by drivers that set up the host before VMs
// go on it (libvirt: the storage pool and the lab's NAT network). Use cases
// call it when a driver has it; both methods are idempotent.
type HostPreparer interface {
	// PlanHost says what PrepareHost would change; empty means ready. It
	// only reads.
	PlanHost(ctx context.Context) ([]string, error)
	PrepareHost(ctx context.Context) error
}

// Connector is implemented by drivers of a remote API (Proxmox). Connect
// asks it once, within a bounded time, whether it answers and takes
// labctl's credentials, and says what to check when not; it returns what
// answered (e.g. "PVE 8.4.1"). Use cases run it first, in a step of its
// own named "connect to " + Endpoint(), so a dead API is not reported by
// whatever step happens to talk to it first.
type Connector interface {
	Endpoint() string
	Connect(ctx context.Context) (string, error)
}

// StableMAC is the MAC labctl gives a VM's first NIC: locally
// administered, in QEMU's 52:54:00 range, derived from lab and VM name, so
// re-creating a VM keeps its address and DHCP reservations.
func StableMAC(lab, name string) string {
	sum := sha256.Sum256([]byte(lab + "/" + name))
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", sum[0], sum[1], sum[2])
}

// Driver creates and removes VMs on one hypervisor from lab.yaml. Every
// method looks at the real state first, so callers can re-run after an
// interruption and converge. Methods honour ctx cancellation.
type Driver interface {
	// Name is the hypervisor's name in lab.yaml.
	Name() string
	// FindImage returns the image EnsureImage would place, or ErrNotFound.
	// It only reads, so plans and dry runs can call it.
	FindImage(ctx context.Context, spec ImageSpec) (Image, error)
	// EnsureImage puts a cloud image on the host, verified by its checksum,
	// and does nothing when it is already there.
	EnsureImage(ctx context.Context, spec ImageSpec) (Image, error)
	// FindVM returns the labctl VM of this lab with the given name, or ErrNotFound.
	FindVM(ctx context.Context, lab, name string) (VM, error)
	// CreateVM creates a stopped VM from spec, with its cloud-init data.
	CreateVM(ctx context.Context, spec VMSpec) (VM, error)
	// StartVM starts a VM; starting a running VM is not an error.
	StartVM(ctx context.Context, vm VM) error
	// WaitAddress waits until the VM reports an IPv4 address on its first NIC.
	WaitAddress(ctx context.Context, vm VM) (netip.Addr, error)
	// ReadFile reads a file inside the guest through its guest agent.
	ReadFile(ctx context.Context, vm VM, path string) ([]byte, error)
	// DeleteVM stops the VM and deletes it with its disks and seed media.
	DeleteVM(ctx context.Context, vm VM) error
	// ListVMs lists the VMs labctl made for a lab ("" lists every lab's).
	ListVMs(ctx context.Context, lab string) ([]VM, error)
	// Capacity reports each node's resources and what its VMs reserve.
	Capacity(ctx context.Context) ([]NodeCapacity, error)
}

// ImageSpec is a cloud image to place on a host.
type ImageSpec struct {
	Node string // Proxmox node; empty for libvirt
	URL  string
	// Checksum is sha256:<hex>; when empty, ChecksumURL lists it.
	Checksum    string
	ChecksumURL string
	// FileName is the name on the host, e.g. noble-server-cloudimg-amd64.qcow2.
	FileName string
}

// Image is a cloud image on a host, referenced by a driver-specific volume id
// (Proxmox: local:import/noble.qcow2; libvirt: the pool volume's path).
type Image struct {
	Node   string
	Volume string
}

// VMSpec is everything needed to create one VM.
type VMSpec struct {
	Lab       string
	Name      string
	Node      string // Proxmox node; empty for libvirt
	ID        int    // Proxmox VMID; 0 picks a free one
	CPUs      int
	MemoryMiB int
	DiskGiB   int
	Image     Image
	Network   NetworkSpec
	CloudInit CloudInit
	Tags      []string // extra tags beyond Tag and LabTag(Lab)
	// UUID is the libvirt domain's UUID (lowercase 8-4-4-4-12 hex); empty
	// lets libvirt pick. labctl's Cluster API provider sets the
	// LibvirtMachine's UID, so the domain is found by it after any crash.
	UUID string
	// ExtraDisksGiB are empty qcow2 data disks after the first
	// (libvirt only).
	ExtraDisksGiB []int
}

// NetworkSpec attaches the VM's first NIC. With Bridge and Network both
// empty, the driver uses the hypervisor's own from lab.yaml (libvirt: its
// network or bridge; Proxmox: the node's bridge).
type NetworkSpec struct {
	Bridge  string // Proxmox bridge or libvirt host bridge
	Network string // libvirt network name
	VLAN    int
	// MAC is the NIC's address (lowercase aa:bb:..); empty lets the
	// hypervisor pick. Static network-config matches the NIC by it.
	MAC string
}

// CloudInit is the VM's NoCloud data. Drivers put it where their platform
// reads it: a seed ISO, Proxmox's built-in keys, or both.
type CloudInit struct {
	// InstanceID is meta-data's instance-id; empty derives one from the
	// data (cloudinit.InstanceID), so new data makes cloud-init run again.
	InstanceID string
	// ProviderID, when set, is meta-data's provider-id: what the node's
	// kubelet registers as its spec.providerID.
	ProviderID    string
	Hostname      string
	User          string
	SSHKeys       []string
	UserData      []byte // #cloud-config document
	NetworkConfig []byte // network-config v2; nil means DHCP
	// Static address for platforms with built-in keys (Proxmox ipconfig0).
	Address    netip.Prefix
	Gateway    netip.Addr
	DNSServers []netip.Addr
	// SeedISO is the NoCloud seed ISO (label cidata) built by
	// internal/cloudinit from the fields above. Proxmox uploads it as
	// content iso and attaches it; nil means built-in keys only.
	SeedISO []byte
}

// VM is a VM as the hypervisor reports it.
type VM struct {
	Name      string
	ID        int    // Proxmox VMID; 0 on libvirt
	Node      string // Proxmox node; empty on libvirt
	Lab       string
	UUID      string // libvirt domain UUID; empty on Proxmox
	Running   bool
	Template  bool
	CPUs      int
	MemoryMiB int
	Tags      []string
}

// NodeCapacity is what one node has and what its VMs take.
type NodeCapacity struct {
	Node          string
	CPUs          int
	MemoryMiB     int
	ReservedMiB   int // configured memory of every non-template VM, stopped ones too
	VMs           int
	RunningVMs    int
	MemoryUsedMiB int
}
