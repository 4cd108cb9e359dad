package config

// Validation of the model (a defaulted Lab), one file per lab.yaml
// section: network.go, hypervisors.go, management.go, images.go,
// clusters.go (with pools.go and tenants.go) and scaletest.go. This file
// holds the validator and the checks every section shares.

import (
	"fmt"
	"math"
	"net/netip"
	"regexp"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Bounds that come from the pinned stack.
const (
	maxKubernetesMinor = 35 // CAPMOX v0.9 is tested with CAPI 1.12, which caps workloads at 1.35
	minKubernetesMinor = 31
	minVMID            = 100
	maxVMID            = 999999999
)

var (
	dnsLabel      = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	tokenIDRe     = regexp.MustCompile(`^[^@!\s=]+@[^@!\s=]+![A-Za-z][A-Za-z0-9._-]*$`)
	fingerprintRe = regexp.MustCompile(`^([0-9A-Fa-f]{2}:){31}[0-9A-Fa-f]{2}$`)
	sha256Re      = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	envNameRe     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	kubeVersionRe = regexp.MustCompile(`^v1\.(\d+)\.(\d+)$`)
	k3sVersionRe  = regexp.MustCompile(`^v1\.\d+\.\d+\+k3s\d+$`)
	ciliumRe      = regexp.MustCompile(`^\d+\.\d+\.\d+$`)
	imageOSes     = []string{"ubuntu-2204", "ubuntu-2404"}
	domainTypes   = []string{"kvm", "qemu"}
)

// validator collects every problem before reporting.
type validator struct {
	lab  *Lab
	errs ErrorList

	subnet  netip.Prefix // network.cidr, when valid
	hvs     map[string]*Hypervisor
	nodes   map[string]map[string]*PVENode // Proxmox node by name, by hypervisor
	images  map[string]*Image              // the first image of each name
	ranges  []ipRange                      // node IP ranges of earlier clusters
	rangeOf []string                       // their paths
	vips    map[netip.Addr]string          // VIPs of earlier clusters: their paths
	ports   map[int]string                 // API ports of earlier tenants: their paths
	vmids   map[string]string              // hypervisor/vmid of the VMs labctl creates: their paths
	lan     []lanAddr                      // lanAddrs, once worked out
}

func (v *validator) add(p *field.Path, format string, args ...any) {
	v.errs = v.errs.collect(&Error{Field: p.String(), Msg: fmt.Sprintf(format, args...)})
}

// Validate checks a defaulted lab and returns every problem at once.
func Validate(lab *Lab) ErrorList {
	v := &validator{lab: lab, hvs: map[string]*Hypervisor{}, nodes: map[string]map[string]*PVENode{},
		images: map[string]*Image{}, vips: map[netip.Addr]string{}, ports: map[int]string{}, vmids: map[string]string{}}
	if lab.APIVersion != APIVersion {
		v.add(field.NewPath("apiVersion"), "must be %s, got %q", APIVersion, lab.APIVersion)
	}
	if lab.Kind != Kind {
		v.add(field.NewPath("kind"), "must be %s, got %q", Kind, lab.Kind)
	}
	v.name(field.NewPath("metadata", "name"), lab.Metadata.Name)
	v.network(field.NewPath("network"))
	v.hypervisors(field.NewPath("hypervisors"))
	v.urls()
	v.management(field.NewPath("management"))
	v.imageList(field.NewPath("images"))
	v.clusters(field.NewPath("clusters"))
	v.scaleTest(field.NewPath("scaleTest"))
	return v.errs
}

func (v *validator) name(p *field.Path, name string) {
	switch {
	case name == "":
		v.add(p, "is required: a lowercase name such as lab1")
	case !dnsLabel.MatchString(name):
		v.add(p, "%q must be lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters", name)
	}
}

func orExample(s, example string) string {
	if s != "" {
		return s
	}
	return example
}

func oneOf(s string, list []string) bool {
	for _, x := range list {
		if s == x {
			return true
		}
	}
	return false
}

// MaxMemory is the most memory lab.yaml gives a VM: 64 TiB, what a 46-bit
// x86-64 physical address space holds. No home-lab host has more, so a
// larger value is a typo (1Ei for 1Gi), and below it memory arithmetic
// (allocatable, CAPMOX's reservations) cannot overflow.
const MaxMemory = 64 << 40

// size checks a VM size against a floor of CPUs and memory bytes.
func (v *validator) size(p *field.Path, s Size, minCPUs int, minMem int64) {
	if s.CPUs < 1 || s.CPUs > 512 {
		v.add(p.Child("cpus"), "must be between 1 and 512, got %d", s.CPUs)
	} else if s.CPUs < minCPUs {
		v.add(p.Child("cpus"), "must be at least %d here, got %d", minCPUs, s.CPUs)
	}
	if q, ok := v.quantityUpTo(p.Child("memory"), s.Memory, "2Gi or 512Mi", MaxMemory); ok && q.Value() < minMem {
		v.add(p.Child("memory"), "%s is too little; at least %s is needed", s.Memory, resource.NewQuantity(minMem, resource.BinarySI))
	}
	if q, ok := v.quantity(p.Child("disk"), s.Disk, "30Gi"); ok && q.Value() < 10<<30 {
		v.add(p.Child("disk"), "%s is too small for a node; use at least 10Gi", s.Disk)
	}
}

func (v *validator) quantity(p *field.Path, s, eg string) (resource.Quantity, bool) {
	return v.quantityUpTo(p, s, eg, 0)
}

// quantityUpTo is quantity that also refuses more than upTo bytes (0:
// no bound of its own), compared as quantities so that 1e19, past
// int64, is too large as well.
func (v *validator) quantityUpTo(p *field.Path, s, eg string, upTo int64) (resource.Quantity, bool) {
	q, err := resource.ParseQuantity(s)
	if err != nil || q.Sign() <= 0 {
		v.add(p, "%q is not a positive quantity such as %s", s, eg)
		return q, false
	}
	if upTo > 0 && q.Cmp(*resource.NewQuantity(upTo, resource.BinarySI)) > 0 {
		v.add(p, "%s is too large: a VM gets at most %s (more than any host holds); write a size such as %s", s, resource.NewQuantity(upTo, resource.BinarySI), eg)
		return q, false
	}
	// Past int64 bytes, Value() wraps round (1e19 would read as too
	// little), and ParseQuantity caps 100Ei at exactly MaxInt64.
	if q.CmpInt64(math.MaxInt64) >= 0 {
		v.add(p, "%s is too large for any VM; write a size such as %s", s, eg)
		return q, false
	}
	return q, true
}
