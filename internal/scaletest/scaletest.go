// Package scaletest runs labctl scale-test: it deploys the inflate
// workload into a workload cluster, changes its size per phase and watches
// the workload cluster (pods, Nodes) and the management cluster
// (MachineDeployment, MachineSets, Machines) to time the autoscaler and
// Cluster API. The workload is always removed at the end, also on Ctrl-C.
package scaletest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/ui"
)

// Namespace and labels of the inflate workload.
const (
	Namespace    = "labctl-scale-test"
	AppLabel     = "app.kubernetes.io/name"
	AppName      = "inflate"
	managedLabel = "app.kubernetes.io/managed-by"
	// UpWorkers is the scale-up target: workers 1→3, the owner's exit
	// criterion.
	UpWorkers = 3
	// systemMilliCPU is what a worker's own pods (Cilium) and reservations
	// take before inflate pods fit.
	systemMilliCPU = 250
)

// Scenarios are the --scenario values.
var Scenarios = []string{"up", "down", "from-zero", "all"}

// Phase names in reports.
const (
	PhaseUp       = "scale-up 1→3"
	PhaseDown     = "scale-down to 0"
	PhaseFromZero = "scale-from-zero"
)

// Options are the inputs of one scale test.
type Options struct {
	IO       *ui.IO
	Cluster  string
	Config   config.ScaleTest
	Scenario string
	// Mgmt and Workload are the two clusters; Namespace and MachineDeployment
	// name the worker pool in the management cluster.
	Mgmt, Workload    *rest.Config
	MgmtNamespace     string
	MachineDeployment string
	// Chart is the file the chart is written to (.svg or .png); empty
	// writes none.
	Chart string
	// PodsPerWorker is how many inflate pods one worker holds (see
	// PodsPerWorker); 0 means 1.
	PodsPerWorker int
	// Pool is the pool's name, which its Nodes carry in labctl's pool
	// label; empty counts every worker Node as the pool's.
	Pool string
}

// nodeSelector selects the pool's Nodes.
func (o Options) nodeSelector() string {
	if o.Pool == "" {
		return ""
	}
	return clusterapi.LabelPool + "=" + o.Pool
}

// PodsPerWorker is how many inflate pods fit on a worker with cpus CPUs:
// 2 for the lab's 4-vCPU workers and 1500m pods.
func PodsPerWorker(cpus int, w config.ScaleWorkload) int {
	q, err := resource.ParseQuantity(w.CPU)
	if err != nil || q.MilliValue() <= 0 {
		return 1
	}
	return max(1, int((int64(cpus)*1000-systemMilliCPU)/q.MilliValue()))
}

// UpPods is the inflate pod count that needs UpWorkers workers: all but
// the last full, the last with one pod.
func UpPods(podsPerWorker int) int { return (UpWorkers-1)*max(1, podsPerWorker) + 1 }

// Report is the outcome of a scale test, as printed with -o json.
type Report struct {
	Cluster string        `json:"cluster"`
	Pass    bool          `json:"pass"`
	Phases  []PhaseReport `json:"phases"`
	Chart   string        `json:"chart,omitempty"`
	Samples []Sample      `json:"samples"`
}

// PhaseReport is one phase's result and timeline.
type PhaseReport struct {
	Name           string      `json:"name"`
	Pass           bool        `json:"pass"`
	Started        time.Time   `json:"started"`
	TotalSeconds   float64     `json:"totalSeconds"`
	TimeoutSeconds float64     `json:"timeoutSeconds"`
	Milestones     []Milestone `json:"milestones"`
	// Stopped says where the timeline stopped when the phase failed.
	Stopped string `json:"stopped,omitempty"`
}

// Milestone is one step of a phase's timeline.
type Milestone struct {
	Name    string    `json:"name"`
	Reached bool      `json:"reached"`
	Time    time.Time `json:"time,omitzero"`
	// AfterSeconds is the time since the phase started; StepSeconds since
	// the previous milestone reached.
	AfterSeconds float64 `json:"afterSeconds,omitempty"`
	StepSeconds  float64 `json:"stepSeconds,omitempty"`
}

// ErrFailed is returned (wrapped) when a phase failed.
var ErrFailed = errors.New("scale test failed")

type phase struct {
	name    string
	up      bool
	from    int // inflate pods before the phase (set up untimed)
	to      int
	timeout time.Duration
	// needsZero: the phase starts from no workers.
	needsZero bool
}

// Phases returns the phases of a scenario with their timeouts.
func Phases(scenario string, c config.ScaleTest, podsPerWorker int) ([]phase, error) {
	parse := func(field, v string) (time.Duration, error) {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("scaleTest.timeouts.%s: %q is not a positive duration such as 15m", field, v)
		}
		return d, nil
	}
	up, err := parse("scaleUp", c.Timeouts.ScaleUp)
	if err != nil {
		return nil, err
	}
	down, err := parse("scaleDown", c.Timeouts.ScaleDown)
	if err != nil {
		return nil, err
	}
	zero, err := parse("fromZero", c.Timeouts.FromZero)
	if err != nil {
		return nil, err
	}
	pUp := phase{name: PhaseUp, up: true, from: 1, to: UpPods(podsPerWorker), timeout: up}
	pDown := phase{name: PhaseDown, from: -1, to: 0, timeout: down}
	pZero := phase{name: PhaseFromZero, up: true, from: 0, to: 1, timeout: zero, needsZero: true}
	switch scenario {
	case "up":
		return []phase{pUp}, nil
	case "down":
		return []phase{pDown}, nil
	case "from-zero":
		return []phase{pZero}, nil
	case "all", "":
		return []phase{pUp, pDown, pZero}, nil
	}
	return nil, fmt.Errorf("--scenario %q: must be one of up, down, from-zero, all", scenario)
}

// Plan lists what a run would do, for --dry-run.
func Plan(o Options) ([]string, error) {
	phases, err := Phases(o.Scenario, o.Config, o.PodsPerWorker)
	if err != nil {
		return nil, err
	}
	w := o.Config.Workload
	lines := []string{fmt.Sprintf("create namespace %s in cluster %s (if missing) with inflate pods: image %s, requests cpu %s, memory %s", Namespace, o.Cluster, w.Image, w.CPU, w.Memory)}
	for _, p := range phases {
		lines = append(lines, fmt.Sprintf("%s: set inflate to %d pods and watch until done or %s", p.name, p.to, p.timeout))
	}
	lines = append(lines, "remove the inflate pods (and the namespace if labctl created it)")
	if o.Chart != "" {
		lines = append(lines, "write the chart to "+o.Chart)
	}
	return lines, nil
}

// tester holds one run's clients and state.
type tester struct {
	o       Options
	kc      kubernetes.Interface
	w       *watcher
	status  *ui.Status
	pod     *corev1.Pod
	created bool // labctl created the namespace
	next    int  // next inflate pod index
}

// Run runs the scenario and returns the report. A failed phase stops the
// run; the report is returned with an error wrapping ErrFailed. The
// workload is removed before Run returns, whatever happened.
func Run(ctx context.Context, o Options) (rep *Report, err error) {
	phases, err := Phases(o.Scenario, o.Config, o.PodsPerWorker)
	if err != nil {
		return nil, err
	}
	pod, err := inflatePod(o.Config.Workload)
	if err != nil {
		return nil, err
	}
	if sel := o.nodeSelector(); sel != "" {
		// Only the tested pool's workers may hold them: another pool's
		// (a KVM pool at its min) would take the pods without a scale-up.
		pod.Spec.NodeSelector = map[string]string{clusterapi.LabelPool: o.Pool}
	}
	kc, err := kubernetes.NewForConfig(o.Workload)
	if err != nil {
		return nil, fmt.Errorf("workload cluster %s: %w", o.Cluster, err)
	}
	dc, err := dynamic.NewForConfig(o.Mgmt)
	if err != nil {
		return nil, fmt.Errorf("management cluster: %w", err)
	}
	if _, err := dc.Resource(mdGVR).Namespace(o.MgmtNamespace).Get(ctx, o.MachineDeployment, metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("cluster %s has no MachineDeployment %s/%s; was it created with labctl cluster create?", o.Cluster, o.MgmtNamespace, o.MachineDeployment)
		}
		return nil, fmt.Errorf("reading MachineDeployment %s/%s: %w", o.MgmtNamespace, o.MachineDeployment, err)
	}

	t := &tester{o: o, kc: kc, w: newWatcher(), status: o.IO.NewStatus(), pod: pod}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	if err := t.w.start(watchCtx, dc, kc, target{ns: o.MgmtNamespace, md: o.MachineDeployment, podNS: Namespace, podLabels: AppLabel + "=" + AppName, nodeLabels: o.nodeSelector()}); err != nil {
		return nil, err
	}
	rep = &Report{Cluster: o.Cluster, Pass: true}
	defer func() {
		// Cleanup outlives a cancelled ctx (Ctrl-C), but not forever.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if cerr := t.cleanup(cctx); cerr != nil {
			err = errors.Join(err, cerr)
		}
		rep.Samples = t.w.chart()
		if o.Chart != "" && len(rep.Samples) > 0 {
			if cerr := WriteChart(o.Chart, o.Cluster, rep.Samples); cerr != nil {
				err = errors.Join(err, cerr)
			} else {
				rep.Chart = o.Chart
			}
		}
	}()
	if err := t.ensureNamespace(ctx); err != nil {
		return rep, err
	}
	for _, p := range phases {
		pr, err := t.runPhase(ctx, p)
		if pr != nil {
			rep.Phases = append(rep.Phases, *pr)
		}
		if err != nil {
			rep.Pass = false
			return rep, err
		}
	}
	return rep, nil
}

// inflatePod is the template of one inflate pod: pause with the configured
// requests, evictable by the autoscaler.
func inflatePod(w config.ScaleWorkload) (*corev1.Pod, error) {
	cpu, err := resource.ParseQuantity(w.CPU)
	if err != nil {
		return nil, fmt.Errorf("scaleTest.workload.cpu %q: %w", w.CPU, err)
	}
	mem, err := resource.ParseQuantity(w.Memory)
	if err != nil {
		return nil, fmt.Errorf("scaleTest.workload.memory %q: %w", w.Memory, err)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   Namespace,
			Labels:      map[string]string{AppLabel: AppName, managedLabel: "labctl"},
			Annotations: map[string]string{"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"},
		},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{
				Name:      AppName,
				Image:     w.Image,
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem}},
			}},
		},
	}, nil
}

func (t *tester) ensureNamespace(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace, Labels: map[string]string{managedLabel: "labctl"}}}
	_, err := t.kc.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{FieldManager: "labctl"})
	switch {
	case err == nil:
		t.created = true
		return nil
	case apierrors.IsAlreadyExists(err):
		cur, gerr := t.kc.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{})
		if gerr == nil && cur.DeletionTimestamp != nil {
			return fmt.Errorf("namespace %s of cluster %s is still being deleted (by an earlier scale-test); retry when it is gone", Namespace, t.o.Cluster)
		}
		return nil
	}
	return fmt.Errorf("creating namespace %s in cluster %s: %w", Namespace, t.o.Cluster, err)
}

// scaleTo makes the inflate pod count n. The pods are bare pods, not a
// Deployment: no controller is needed to create or remove them, and they
// are deleted with no grace period (pause has nothing to shut down).
func (t *tester) scaleTo(ctx context.Context, n int) error {
	pods := t.kc.CoreV1().Pods(Namespace)
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: AppLabel + "=" + AppName})
	if err != nil {
		return fmt.Errorf("listing inflate pods: %w", err)
	}
	have := len(list.Items)
	for i := have; i < n; i++ {
		p := t.pod.DeepCopy()
		t.next++
		p.Name = AppName + "-" + strconv.Itoa(t.next)
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{FieldManager: "labctl"}); err != nil {
			if apierrors.IsAlreadyExists(err) {
				i--
				continue
			}
			return fmt.Errorf("creating inflate pod %s: %w", p.Name, err)
		}
	}
	for i := n; i < have; i++ {
		name := list.Items[i].Name
		if err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting inflate pod %s: %w", name, err)
		}
	}
	return nil
}

// runPhase sets up the phase's starting point (untimed), then times it.
func (t *tester) runPhase(ctx context.Context, p phase) (*PhaseReport, error) {
	if p.needsZero {
		_, _, _, nodes, _, machines, md := t.w.snapshot()
		if nodes > 0 || machines > 0 || md > 0 {
			return nil, fmt.Errorf("%s needs a cluster with no workers, but MachineDeployment %s has %d replicas, %d Machines and %d worker Nodes: run --scenario down first: %w",
				p.name, t.o.MachineDeployment, md, machines, nodes, ErrFailed)
		}
	}
	if p.up && p.from > 0 {
		// Reach the starting point: p.from pods Running.
		t.status.Start(fmt.Sprintf("%s: set up %d inflate pod", p.name, p.from))
		if err := t.scaleTo(ctx, p.from); err != nil {
			t.status.Fail(err.Error())
			return nil, err
		}
		t.w.mu.Lock()
		tl := newTimeline(true, p.from, time.Now(), &t.w.st)
		t.w.mu.Unlock()
		if ok, err := t.wait(ctx, tl, p.timeout); !ok {
			t.status.Fail("not Running")
			if err == nil {
				err = fmt.Errorf("%s: the starting inflate pod did not run within %s: %w", p.name, p.timeout, ErrFailed)
			}
			return nil, err
		}
		t.status.OK("")
	}

	t.status.Start(p.name)
	start := time.Now()
	t.w.mu.Lock()
	tl := newTimeline(p.up, p.to, start, &t.w.st)
	t.w.mu.Unlock()
	if err := t.scaleTo(ctx, p.to); err != nil {
		t.status.Fail(err.Error())
		return nil, err
	}
	ok, werr := t.wait(ctx, tl, p.timeout)
	end := time.Now()
	t.w.mu.Lock()
	pr := &PhaseReport{Name: p.name, Pass: ok, Started: start, TotalSeconds: seconds(end.Sub(start)),
		TimeoutSeconds: p.timeout.Seconds(), Milestones: tl.milestones()}
	if ok {
		last := pr.Milestones[len(pr.Milestones)-1]
		pr.TotalSeconds = last.AfterSeconds
	} else {
		pr.Stopped = tl.stopped(&t.w.st)
	}
	t.w.mu.Unlock()
	if ok {
		t.status.OK(ui.Duration(time.Duration(pr.TotalSeconds * float64(time.Second))))
		return pr, nil
	}
	if werr != nil {
		t.status.Fail("interrupted")
		return pr, werr
	}
	t.status.Fail(pr.Stopped)
	return pr, fmt.Errorf("%s did not finish within %s: %s: %w", p.name, p.timeout, pr.Stopped, ErrFailed)
}

// wait watches until the timeline is done, the timeout passes (false,
// nil) or ctx ends (false, its error).
func (t *tester) wait(ctx context.Context, tl *timeline, timeout time.Duration) (bool, error) {
	t.w.setObserver(tl)
	defer t.w.setObserver(nil)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		t.w.mu.Lock()
		done := tl.done
		t.w.mu.Unlock()
		if done {
			return true, nil
		}
		pending, running, total, nodes, ready, machines, md := t.w.snapshot()
		t.status.Update(fmt.Sprintf("pods %d/%d Running (%d Pending) · MachineDeployment %d · Machines %d · Nodes %d/%d Ready",
			running, total, pending, md, machines, ready, nodes))
		select {
		case <-t.w.changed:
		case <-timer.C:
			return false, nil
		case <-ctx.Done():
			return false, fmt.Errorf("interrupted: %w", context.Cause(ctx))
		}
	}
}

// cleanup deletes every inflate pod, and the namespace if labctl made it.
func (t *tester) cleanup(ctx context.Context) error {
	err := t.kc.CoreV1().Pods(Namespace).DeleteCollection(ctx,
		metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)},
		metav1.ListOptions{LabelSelector: AppLabel + "=" + AppName})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the inflate workload from cluster %s (delete the pods in namespace %s by hand): %w", t.o.Cluster, Namespace, err)
	}
	if t.created {
		err := t.kc.CoreV1().Namespaces().Delete(ctx, Namespace, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("removing namespace %s from cluster %s: %w", Namespace, t.o.Cluster, err)
		}
	}
	return nil
}

// Text prints the report as tables: one line per phase, then each
// phase's timeline.
func Text(s *ui.IO, rep *Report) func(w io.Writer) error {
	return func(w io.Writer) error {
		rows := [][]string{}
		for _, p := range rep.Phases {
			result := "pass"
			if !p.Pass {
				result = "FAIL"
			}
			rows = append(rows, []string{p.Name, result, secs(p.TotalSeconds), secs(p.TimeoutSeconds)})
		}
		if err := s.Table(w, []string{"PHASE", "RESULT", "TOTAL", "TIMEOUT"}, rows); err != nil {
			return err
		}
		for _, p := range rep.Phases {
			fmt.Fprintf(w, "\n%s\n", p.Name)
			rows := [][]string{}
			for _, m := range p.Milestones {
				if !m.Reached {
					rows = append(rows, []string{m.Name, "-", "-"})
					continue
				}
				rows = append(rows, []string{m.Name, signedSecs(m.AfterSeconds), signedSecs(m.StepSeconds)})
			}
			if err := s.Table(w, []string{"MILESTONE", "SINCE START", "STEP"}, rows); err != nil {
				return err
			}
			if p.Stopped != "" {
				fmt.Fprintf(w, "stopped: %s\n", p.Stopped)
			}
		}
		if rep.Chart != "" {
			fmt.Fprintf(w, "\nchart: %s\n", rep.Chart)
		}
		return nil
	}
}

func secs(s float64) string { return strconv.FormatFloat(s, 'f', 1, 64) + "s" }

// signedSecs is an offset with its sign. A step can be negative: the
// Node of a new machine may register before Cluster API marks the Machine
// provisioned, the milestone before it.
func signedSecs(s float64) string {
	if s < 0 {
		return secs(s)
	}
	return "+" + secs(s)
}
