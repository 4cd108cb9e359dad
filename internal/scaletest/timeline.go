package scaletest

import (
	"fmt"
	"time"
)

// Milestones of a phase, in timeline order.
const (
	PodPending         = "pod Pending"
	MDScaledUp         = "MachineDeployment replicas raised"
	MachineCreated     = "Machine created"
	MachineProvisioned = "Machine provisioned"
	NodeRegistered     = "Node registered"
	NodeReady          = "Node Ready"
	PodsRunning        = "pods Running"

	WorkloadRemoved = "workload removed"
	MDScaledDown    = "MachineDeployment replicas lowered"
	MachineDeleting = "Machine deleting"
	MachineGone     = "Machine gone"
	NodeGone        = "Node gone"
)

var (
	upMilestones   = []string{PodPending, MDScaledUp, MachineCreated, MachineProvisioned, NodeRegistered, NodeReady, PodsRunning}
	downMilestones = []string{WorkloadRemoved, MDScaledDown, MachineDeleting, MachineGone, NodeGone}
)

// timeline records when each milestone was first seen in one phase. Its
// observe runs under the watcher's lock on every event.
type timeline struct {
	up    bool
	want  int // inflate pods that must run (scale-up phases)
	start time.Time
	at    map[string]time.Time

	// Baseline at the phase start.
	baseMD       int64
	baseMachines map[string]bool
	baseNodes    map[string]bool
	// For the failure message.
	lastMD int64
	done   bool
}

func newTimeline(up bool, want int, start time.Time, s *state) *timeline {
	t := &timeline{up: up, want: want, start: start, at: map[string]time.Time{},
		baseMD: s.mdReplicas, baseMachines: map[string]bool{}, baseNodes: map[string]bool{}}
	for m := range s.machines {
		t.baseMachines[m] = true
	}
	for n := range s.nodes {
		t.baseNodes[n] = true
	}
	return t
}

func (t *timeline) mark(name string, at time.Time) {
	if _, ok := t.at[name]; !ok {
		if at.Before(t.start) {
			at = t.start
		}
		t.at[name] = at
	}
}

func (t *timeline) observe(s *state, at time.Time) {
	t.lastMD = s.mdReplicas
	if t.up {
		t.observeUp(s, at)
	} else {
		t.observeDown(s, at)
	}
}

func (t *timeline) observeUp(s *state, at time.Time) {
	if s.pending() > 0 {
		t.mark(PodPending, at)
	}
	if s.mdReplicas > t.baseMD {
		t.mark(MDScaledUp, at)
	}
	unprovisioned := 0
	for name, m := range s.machines {
		if t.baseMachines[name] {
			continue
		}
		t.mark(MachineCreated, at)
		if m.provisioned {
			t.mark(MachineProvisioned, at)
		} else {
			unprovisioned++
		}
	}
	for name, ready := range s.nodes {
		if t.baseNodes[name] {
			continue
		}
		t.mark(NodeRegistered, at)
		if ready {
			t.mark(NodeReady, at)
		}
	}
	if len(s.pods) >= t.want && s.running() >= t.want {
		t.mark(PodsRunning, at)
		// CAPMOX marks a Machine provisioned only once the guest agent
		// reports cloud-init done, which can come after its Node runs the
		// pods: the phase waits for it, so that its timeline is whole.
		t.done = unprovisioned == 0
	}
}

func (t *timeline) observeDown(s *state, at time.Time) {
	if len(s.pods) == 0 {
		t.mark(WorkloadRemoved, at)
	}
	if s.mdReplicas < t.baseMD || (s.mdSeen && s.mdReplicas == 0) {
		t.mark(MDScaledDown, at)
	}
	for _, m := range s.machines {
		if m.deleting {
			t.mark(MachineDeleting, at)
		}
	}
	if len(s.machines) == 0 {
		// Deleted without a deleting state seen in between (a fast delete).
		if len(t.baseMachines) > 0 {
			t.mark(MachineDeleting, at)
		}
		t.mark(MachineGone, at)
	}
	if len(s.nodes) == 0 {
		t.mark(NodeGone, at)
	}
	_, removed := t.at[WorkloadRemoved]
	t.done = removed && len(s.machines) == 0 && len(s.nodes) == 0 && s.mdReplicas == 0
}

// milestones lists the phase's milestones with their offsets.
func (t *timeline) milestones() []Milestone {
	names := downMilestones
	if t.up {
		names = upMilestones
	}
	out := make([]Milestone, 0, len(names))
	var prev time.Duration
	for _, n := range names {
		m := Milestone{Name: n}
		if at, ok := t.at[n]; ok {
			d := at.Sub(t.start)
			m.Reached, m.Time = true, at
			m.AfterSeconds = seconds(d)
			m.StepSeconds = seconds(d - prev)
			prev = d
		}
		out = append(out, m)
	}
	return out
}

// stopped says where the timeline stopped and what to check. It is called
// when the phase ran out of time.
func (t *timeline) stopped(s *state) string {
	has := func(n string) bool { _, ok := t.at[n]; return ok }
	if t.up {
		switch {
		case has(PodsRunning):
			return "the inflate pods run, but a new Machine was never marked provisioned: check the infrastructure provider (CAPMOX marks it once the guest agent reports cloud-init done; ProxmoxMachine conditions)"
		case !has(PodPending) && s.running() < t.want:
			return "no inflate pod was seen Pending: check the workload cluster's API server and the labctl namespace"
		case !has(MDScaledUp):
			return fmt.Sprintf("the MachineDeployment stayed at %d replicas while inflate pods were Pending: check the cluster-autoscaler in the management cluster (its logs and its node-group min/max annotations)", t.lastMD)
		case !has(MachineCreated):
			return fmt.Sprintf("no Machine was created after the MachineDeployment went to %d: check the infrastructure provider", t.lastMD)
		case !has(MachineProvisioned):
			return "a Machine was created but never provisioned: check the infrastructure provider (ProxmoxMachine events, Proxmox capacity)"
		case !has(NodeRegistered):
			return "a Machine was provisioned but no Node registered: check the VM's bootstrap (cloud-init, kubeadm join, the control plane endpoint)"
		case !has(NodeReady):
			return "a Node registered but never became Ready: check the CNI (Cilium) and the kubelet on the new VM"
		default:
			return fmt.Sprintf("Nodes are Ready but only %d of %d inflate pods run: check scheduling (taints, allocatable CPU and memory)", s.running(), t.want)
		}
	}
	switch {
	case !has(WorkloadRemoved):
		return fmt.Sprintf("%d inflate pods are still there after being deleted: check the workload cluster (finalizers, kubelet)", len(s.pods))
	case !has(MDScaledDown):
		return fmt.Sprintf("the MachineDeployment stayed at %d replicas after the workload was removed: check the cluster-autoscaler's scale-down profile (scale-down-unneeded-time) and its min-size annotation", t.lastMD)
	case !has(MachineDeleting) && len(s.machines) > 0:
		return fmt.Sprintf("the MachineDeployment went to %d but no Machine is being deleted: check the CAPI controllers", t.lastMD)
	case len(s.machines) > 0:
		return fmt.Sprintf("%d Machines are still being deleted: check the node drain and the infrastructure provider (VM deletion)", len(s.machines))
	default:
		return fmt.Sprintf("the Machines are gone but %d worker Nodes are still registered: check CAPI's node deletion", len(s.nodes))
	}
}

func seconds(d time.Duration) float64 {
	return float64(d.Round(time.Millisecond)) / float64(time.Second)
}
