package scaletest

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/labctl/labctl/internal/ui"
)

func newState() *state {
	return &state{pods: map[string]corev1.PodPhase{}, nodes: map[string]bool{}, machines: map[string]machine{}, mdSeen: true}
}

// Each way a scale-up can stall names the part to check.
func TestStoppedSaysWhereScaleUpStalled(t *testing.T) {
	start := time.Now()
	s := newState()
	s.mdReplicas = 1
	s.machines["w0"] = machine{provisioned: true}
	s.nodes["w0"] = true
	s.pods["inflate-1"] = corev1.PodRunning
	tl := newTimeline(true, 3, start, s)
	step := func(f func()) string {
		f()
		tl.observe(s, start.Add(time.Second))
		return tl.stopped(s)
	}
	cases := []struct {
		change func()
		want   string
	}{
		{func() {}, "no inflate pod was seen Pending"},
		{func() { s.pods["inflate-2"], s.pods["inflate-3"] = corev1.PodPending, corev1.PodPending }, "the MachineDeployment stayed at 1 replicas"},
		{func() { s.mdReplicas = 3 }, "no Machine was created after the MachineDeployment went to 3: check the infrastructure provider"},
		{func() { s.machines["w1"] = machine{} }, "never provisioned: check the infrastructure provider"},
		{func() { s.machines["w1"] = machine{provisioned: true} }, "no Node registered: check the VM's bootstrap"},
		{func() { s.nodes["w1"] = false }, "never became Ready: check the CNI (Cilium)"},
		{func() { s.nodes["w1"] = true }, "only 1 of 3 inflate pods run"},
	}
	for _, c := range cases {
		if got := step(c.change); !strings.Contains(got, c.want) {
			t.Errorf("stopped = %q, want %q", got, c.want)
		}
	}
	if tl.done {
		t.Fatal("done before the pods run")
	}
	s.pods["inflate-2"], s.pods["inflate-3"] = corev1.PodRunning, corev1.PodRunning
	tl.observe(s, start.Add(2*time.Second))
	ms := tl.milestones()
	if !tl.done || !ms[len(ms)-1].Reached || ms[len(ms)-1].AfterSeconds != 2 || ms[len(ms)-1].StepSeconds != 1 {
		t.Errorf("done %v, milestones %+v", tl.done, ms)
	}
}

// The pods may run before Cluster API marks the new Machine provisioned
// (CAPMOX waits for cloud-init's status): the phase waits for it, so no
// milestone is missing, and its time is still the pods'.
func TestScaleUpWaitsForTheMachineProvisioned(t *testing.T) {
	start := time.Now()
	s := newState()
	tl := newTimeline(true, 1, start, s)
	s.pods["inflate-1"] = corev1.PodPending
	tl.observe(s, start.Add(time.Second))
	s.mdReplicas = 1
	s.machines["w0"] = machine{}
	s.nodes["w0"] = true
	s.pods["inflate-1"] = corev1.PodRunning
	tl.observe(s, start.Add(20*time.Second))
	if tl.done {
		t.Fatal("done while the new Machine is not provisioned")
	}
	if got := tl.stopped(s); !strings.Contains(got, "the inflate pods run, but a new Machine was never marked provisioned") {
		t.Errorf("stopped = %q", got)
	}
	s.machines["w0"] = machine{provisioned: true}
	tl.observe(s, start.Add(25*time.Second))
	if !tl.done {
		t.Fatal("not done once the Machine is provisioned")
	}
	ms := tl.milestones()
	for _, m := range ms {
		if !m.Reached {
			t.Errorf("milestone %q not reached: %+v", m.Name, ms)
		}
	}
	if last := ms[len(ms)-1]; last.Name != PodsRunning || last.AfterSeconds != 20 {
		t.Errorf("the last milestone is %+v; want pods Running at +20s", last)
	}
	if i := slices.IndexFunc(ms, func(m Milestone) bool { return m.Name == MachineProvisioned }); i < 0 || ms[i].AfterSeconds != 25 {
		t.Errorf("Machine provisioned: %+v; want at +25s", ms)
	}
}

func TestStoppedSaysWhereScaleDownStalled(t *testing.T) {
	start := time.Now()
	s := newState()
	s.mdReplicas = 2
	s.machines["w0"], s.machines["w1"] = machine{provisioned: true}, machine{provisioned: true}
	s.nodes["w0"], s.nodes["w1"] = true, true
	s.pods["inflate-1"] = corev1.PodRunning
	tl := newTimeline(false, 0, start, s)
	cases := []struct {
		change func()
		want   string
	}{
		{func() {}, "1 inflate pods are still there"},
		{func() { delete(s.pods, "inflate-1") }, "stayed at 2 replicas after the workload was removed"},
		{func() { s.mdReplicas = 0 }, "no Machine is being deleted"},
		{func() { s.machines["w0"] = machine{deleting: true} }, "2 Machines are still being deleted"},
		{func() { delete(s.machines, "w0"); delete(s.machines, "w1") }, "2 worker Nodes are still registered"},
	}
	for _, c := range cases {
		c.change()
		tl.observe(s, start.Add(time.Second))
		if got := tl.stopped(s); !strings.Contains(got, c.want) {
			t.Errorf("stopped = %q, want %q", got, c.want)
		}
	}
	s.nodes = map[string]bool{}
	tl.observe(s, start.Add(3*time.Second))
	if !tl.done {
		t.Error("not done with no Machines and no Nodes")
	}
}

func TestPhasesAndChartErrors(t *testing.T) {
	c := testConfig("15m", "10m", "15m")
	if ps, err := Phases("all", c, 2); err != nil || len(ps) != 3 || ps[1].timeout != 10*time.Minute || ps[0].to != 5 {
		t.Errorf("Phases(all) = %v, %v", ps, err)
	}
	// The lab's 4-vCPU workers hold two 1500m pods: 1→3 workers is 1→5 pods.
	if got := PodsPerWorker(4, c.Workload); got != 2 {
		t.Errorf("PodsPerWorker(4, 1500m) = %d, want 2", got)
	}
	if got := PodsPerWorker(2, c.Workload); got != 1 {
		t.Errorf("PodsPerWorker(2, 1500m) = %d, want 1", got)
	}
	if _, err := Phases("sideways", c, 2); err == nil {
		t.Error("unknown scenario accepted")
	}
	c.Timeouts.FromZero = "soon"
	if _, err := Phases("from-zero", c, 2); err == nil || !strings.Contains(err.Error(), `scaleTest.timeouts.fromZero: "soon"`) {
		t.Errorf("bad timeout: %v", err)
	}
	if err := WriteChart(t.TempDir()+"/chart.gif", "lab1", []Sample{{At: time.Now()}}); err == nil || !strings.Contains(err.Error(), ".svg or .png") {
		t.Errorf("gif chart: %v", err)
	}
	if _, err := inflatePod(testConfig("1m", "1m", "1m").Workload); err != nil {
		t.Error(err)
	}
	w := testConfig("1m", "1m", "1m").Workload
	w.CPU = "lots"
	if _, err := inflatePod(w); err == nil || !strings.Contains(err.Error(), "scaleTest.workload.cpu") {
		t.Errorf("bad cpu: %v", err)
	}
}

// The timeline table signs each offset once: a milestone reached before
// the one above it (a Node registered before its Machine is marked
// provisioned, as on the box) shows a negative step, not "+-2.5s".
func TestTextSignsNegativeSteps(t *testing.T) {
	rep := &Report{Phases: []PhaseReport{{Name: "scale-up 1→3", Pass: true, Milestones: []Milestone{
		{Name: "Machine provisioned", Reached: true, AfterSeconds: 16.9, StepSeconds: 15},
		{Name: "Node registered", Reached: true, AfterSeconds: 14.4, StepSeconds: -2.5},
	}}}}
	io, _, out, _ := ui.Test()
	if err := Text(io, rep)(out); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "-2.5s") || strings.Contains(got, "+-") || !strings.Contains(got, "+16.9s") {
		t.Errorf("the timeline reads:\n%s\nwant +16.9s and -2.5s, never +-", got)
	}
}
