package config

import (
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// scaleTest checks scaleTest: the inflate pods must fit on a worker.
func (v *validator) scaleTest(p *field.Path) {
	st := v.lab.ScaleTest
	if st.Workload.Image == "" {
		v.add(p.Child("workload", "image"), "is required, e.g. %s", DefaultInflateImage)
	}
	cpu, cpuOK := v.quantity(p.Child("workload", "cpu"), st.Workload.CPU, "1500m or 2")
	mem, memOK := v.quantity(p.Child("workload", "memory"), st.Workload.Memory, "512Mi")
	// An inflate pod bigger than a whole worker never schedules, so the
	// autoscaler never scales up and the test cannot pass. scale-test
	// drives a cluster's first pool.
	for i, c := range v.lab.Clusters {
		if len(c.Pools) == 0 {
			continue
		}
		w := c.Pools[0].Size
		if cpuOK && w.CPUs > 0 && cpu.MilliValue() > int64(w.CPUs)*1000 {
			v.add(p.Child("workload", "cpu"), "%s is more than a worker of clusters[%d] (%s) has: %d vCPUs; the pods could never run, so the autoscaler would never add a worker", st.Workload.CPU, i, c.Name, w.CPUs)
		}
		// Against what the node offers, not the VM's size (Allocatable).
		if _, wm, err := w.Allocatable(); memOK && err == nil && mem.Cmp(wm) > 0 {
			v.add(p.Child("workload", "memory"), "%s is more than a worker of clusters[%d] (%s) has: %s allocatable of its %s (see docs/clusters.md); the pods could never run, so the autoscaler would never add a worker", st.Workload.Memory, i, c.Name, wm.String(), w.Memory)
		}
	}
	for _, t := range []struct{ name, val string }{
		{"scaleUp", st.Timeouts.ScaleUp}, {"scaleDown", st.Timeouts.ScaleDown}, {"fromZero", st.Timeouts.FromZero},
	} {
		if d, err := time.ParseDuration(t.val); err != nil || d <= 0 {
			v.add(p.Child("timeouts", t.name), "%q is not a duration such as 15m", t.val)
		}
	}
}
