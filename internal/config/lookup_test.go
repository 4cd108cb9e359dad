package config

import (
	"strings"
	"testing"
)

func TestLookupsByName(t *testing.T) {
	lab := &Lab{
		Hypervisors: []Hypervisor{{Name: "pve"}, {Name: "kvm"}},
		Clusters:    []Cluster{{Name: "lab1"}},
	}
	h, err := lab.Hypervisor("kvm")
	if err != nil || h != &lab.Hypervisors[1] {
		t.Fatalf("Hypervisor(kvm) = %p, %v; want the lab's own entry %p", h, err, &lab.Hypervisors[1])
	}
	c, err := lab.Cluster("lab1")
	if err != nil || c != &lab.Clusters[0] {
		t.Fatalf("Cluster(lab1) = %p, %v", c, err)
	}
	if _, err := lab.Hypervisor("pv"); err == nil || err.Error() != `hypervisor "pv" is not in the lab config; it has: pve, kvm` {
		t.Errorf("typo: %v", err)
	}
	if _, err := lab.Image("noble"); err == nil || !strings.Contains(err.Error(), "defines no images; add one under images") {
		t.Errorf("no images: %v", err)
	}
}
