package scaletest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// BenchmarkWatchLatency measures the delay from an API write (a Node
// label in the workload cluster, MachineDeployment replicas in the
// management cluster) to labctl's watcher recording the event. The goal
// is at most 1 s; it reports the median and the worst delay in ms.
func BenchmarkWatchLatency(b *testing.B) {
	bed := startBed(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := bed.kc.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	w := newWatcher()
	got := make(chan string, 16)
	w.recorded = func(kind, name string, _ time.Time) { got <- kind }
	if err := w.start(ctx, bed.dc, bed.kc, target{ns: testNS, md: testMD, podNS: Namespace, podLabels: AppLabel + "=" + AppName}); err != nil {
		b.Fatal(err)
	}
	drain := func() {
		for {
			select {
			case <-got:
			default:
				return
			}
		}
	}
	writes := []struct {
		kind  string
		write func(i int) error
	}{
		{"Node", func(i int) error {
			p := fmt.Sprintf(`{"metadata":{"labels":{"bench":"%d"}}}`, i)
			_, err := bed.kc.CoreV1().Nodes().Patch(ctx, "bench", types.MergePatchType, []byte(p), metav1.PatchOptions{})
			return err
		}},
		{"MachineDeployment", func(i int) error {
			p := fmt.Sprintf(`{"spec":{"replicas":%d}}`, i%5+2)
			_, err := bed.dc.Resource(mdGVR).Namespace(testNS).Patch(ctx, testMD, types.MergePatchType, []byte(p), metav1.PatchOptions{})
			return err
		}},
	}
	var delays []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		wr := writes[i%len(writes)]
		drain()
		began := time.Now()
		if err := wr.write(i); err != nil {
			b.Fatal(err)
		}
		for kind := ""; kind != wr.kind; {
			select {
			case kind = <-got:
			case <-time.After(5 * time.Second):
				b.Fatalf("no %s event recorded 5s after the write", wr.kind)
			}
		}
		delays = append(delays, time.Since(began))
	}
	b.StopTimer()
	slices.Sort(delays)
	worst := delays[len(delays)-1]
	b.ReportMetric(float64(delays[len(delays)/2].Microseconds())/1000, "ms-median")
	b.ReportMetric(float64(worst.Microseconds())/1000, "ms-max")
	if worst > time.Second {
		b.Errorf("an event took %s to be recorded, goal is at most 1s", worst)
	}
}
