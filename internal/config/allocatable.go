package config

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
)

// What a worker VM keeps from its pods. Together they turn the VM's memory
// into the allocatable memory its node reports (see docs/clusters.md).
const (
	// EvictionHardMemory is kubelet's default hard eviction threshold,
	// memory.available<100Mi (kubernetes pkg/kubelet/apis/config/v1beta1
	// defaults_linux.go, DefaultEvictionHard). labctl's kubeadm config sets
	// no evictionHard, kubeReserved or systemReserved, so kubelet keeps
	// exactly this back: allocatable = capacity - kubeReserved -
	// systemReserved - hard eviction (pkg/kubelet/cm
	// node_container_manager_linux.go, GetNodeAllocatableReservation).
	EvictionHardMemory = 100 << 20
	// KernelFixedMemory is the part of the VM's RAM the guest never shows
	// in MemTotal (kubelet's memory capacity, read by cAdvisor from
	// /proc/meminfo) whatever its size: firmware-reserved ranges, the
	// kernel image and early boot allocations. It is set so that a 2 GiB
	// worker comes out at the ~1.78 GiB allocatable measured in the
	// owner's lab (LAB.md).
	KernelFixedMemory = 96 << 20
	// KernelMemmapDivisor: the kernel also keeps a 64-byte struct page
	// for every 4 KiB page of RAM, 1/64 of it.
	KernelMemmapDivisor = 64
)

// Allocatable is what the node of a VM of size s offers to pods: its vCPUs
// (kubelet reserves no CPU here, and no eviction signal is about CPU), and
// its memory less what the kernel and firmware keep (MemTotal) and less
// kubelet's hard eviction threshold, rounded down to whole MiB.
func (s Size) Allocatable() (cpus int, memory resource.Quantity, err error) {
	q, err := resource.ParseQuantity(s.Memory)
	if err != nil {
		return 0, resource.Quantity{}, fmt.Errorf("memory %q: %w", s.Memory, err)
	}
	ram := q.Value()
	mem := ram - ram/KernelMemmapDivisor - KernelFixedMemory - EvictionHardMemory
	if mem < 1<<20 {
		return 0, resource.Quantity{}, fmt.Errorf("memory %s leaves nothing for pods once the kernel and kubelet have their share", s.Memory)
	}
	return s.CPUs, *resource.NewQuantity(mem>>20<<20, resource.BinarySI), nil
}
