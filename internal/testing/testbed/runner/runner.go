// Package runner plays the kubelet (and the deployment controller) of the
// test bed's management cluster for the upstream components labctl pins.
// For each Deployment whose container image is one of them (Images: the
// operator, the Cluster API providers, the cluster-autoscaler) it runs the
// binary hack/testenv.sh built from the same module, with the container's
// own command, args and env; a pod of several such containers (a Kamaji
// TenantControlPlane's kube-apiserver, kube-controller-manager and
// kube-scheduler) gets a process per container, restarted each on its own:
//
//   - the Secrets, ConfigMaps, projected Secrets and ConfigMaps and
//     emptyDirs the container mounts become files in a folder per
//     process, each mountPath mapped into it; TMPDIR
//     points there too, so controller-runtime's default certificate folder
//     lands in the mapped /tmp;
//   - KUBECONFIG replaces the in-cluster config;
//   - the Deployment's status (replicas, available, conditions) is written
//     back from the process and its readiness probe, and replicas 0 once a
//     Deployment scaled to 0 has its processes stopped.
//
// One departure from "the container's own args": the listeners. Every
// process here shares the machine's loopback, where the containers' fixed
// ports (9443 webhook, 9440 health, 8443 metrics...) would collide, so the
// runner moves each listen flag (Image.Addrs, Image.Ports) to a free
// loopback port, and maps the container's ports (for probes and Service
// targetPorts) to them. A flag naming a mounted path (--flag=path or --flag
// path, or a file under it) is mapped into the
// process's folder, and a certificate-folder flag left at its default is
// set to the mapped default. And controller-runtime's leader election is
// turned off (Image.CRLeaderElection says why). A binary that reads its
// in-cluster config with client-go's BuildConfigFromFlags("", "") (which
// ignores KUBECONFIG) is given the same kubeconfig through the flag that
// replaces it, when the container leaves that flag unset
// (Image.InClusterFlag).
//
// It also plays the Service network for them: each Service selecting a
// process gets an EndpointSlice leading to it on loopback (endpoints), so
// webhook configurations and CRD conversion webhooks reach the process
// through their Service, as written by their owners, with the caBundle
// that cert-manager's CA injection (or its stand-in) fills. A process that
// dials Services by name (Kamaji: https://<tcp>.<namespace>.svc:<port>)
// gets an /etc/hosts of its own naming them (names.go). With
// ServeLoadBalancers it stands in for k3s's ServiceLB too (servicelb.go).
// For the StatefulSet Pods it runs (statefulset.go) it is a Node's
// kubelet: the Pods are bound to its Node (node.go), whose kubelet server
// answers the API server's pods/portforward (portforward.go).
//
// When a Deployment changes, its process is restarted with the new spec;
// when it goes away (or scales to 0), the process is stopped. A process
// that exits is started again after a pause, as kubelet restarts a
// container. Each process's log is a file; a failed test gets each log's
// tail.
package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/versions"
)

// Runner runs the known Deployments of one API server.
type Runner struct {
	t          testing.TB
	cs         kubernetes.Interface
	cfg        *rest.Config
	kubeconfig string
	bins       string
	dir        string
	pins       versions.Pins
	kick       chan struct{}
	stop       context.CancelFunc
	done       chan struct{}

	mu    sync.Mutex
	procs map[string]*Proc
	// Handlers run Deployments of other images in-process (cert-manager's
	// stand-in): by image name, a function that says whether the
	// Deployment's workload is ready, and why not.
	handlers map[string]Handler
	// podHandlers play the kubelet for bare Pods (a Job's) of other
	// images, by image name.
	podHandlers map[string]PodHandler
	// portLocks are the machine-wide locks held on ports an image
	// hard-codes (Image.FixedPorts), by port; released by Stop.
	portLocks map[int]func()
	// reach are the machine's loopback ports every network namespace of
	// a process reaches (Image.OwnNetwork).
	reach map[int]bool
	// images are the images run from binaries: Images, and those Run adds.
	images []Image
	// lbAddr is the node address of the ServiceLB stand-in, "" when off
	// (ServeLoadBalancers); lbs its forwards, by Service and port.
	lbAddr string
	lbs    map[string]*lbForward

	// nodeMu guards kubelet and nodeUp: the runner's Node (node.go) and
	// its kubelet server (portforward.go), made when a Pod is first bound.
	nodeMu  sync.Mutex
	kubelet *kubeletServer
	nodeUp  bool
}

// PodHandler stands in for the container of a Pod (a Job's, such as a
// chart's hook) whose binary cannot be built here: it is called on each
// pass until it returns a terminal phase, which is then reported.
type PodHandler func(ctx context.Context, p *corev1.Pod) (phase corev1.PodPhase, message string)

// Handler stands in for a component whose binary cannot be built here: it
// is called on each pass for each Deployment running its image, and says
// whether the Deployment is ready.
type Handler func(ctx context.Context, d *appsv1.Deployment) (ready bool, why string)

// Proc is one process the runner started for a container of a Deployment.
type Proc struct {
	// Deployment is namespace/name.
	Deployment string
	// Container is the container's name.
	Container string
	Image     Image
	// Log is the file its stdout and stderr go to.
	Log string
	// Ports maps the container's ports to the loopback ports the process
	// listens on.
	Ports map[int32]int
	// Args are the arguments it was started with.
	Args []string
	// Pod are the processes of all the pod's containers the runner runs,
	// this one first, on the Proc that Runner.Proc returns (the pod's
	// first such container); nil on the others.
	Pod []*Proc

	container corev1.Container
	// sandbox is its network namespace (Image.OwnNetwork), kept across
	// restarts.
	sandbox *sandbox
	spec    string // hash of what it was started from
	labels  map[string]string
	// podUID is the Pod's UID for a StatefulSet's Pod (podView), whose
	// ports the kubelet server forwards; "" for a Deployment's process,
	// which stands for no Pod the API server has.
	podUID types.UID
	// hostname and subdomain are the pod's (a StatefulSet's Pod has both:
	// <pod>.<governing Service>), for its DNS name in the hosts file.
	hostname, subdomain string
	// mu guards cmd, exited and exitErr: a restart replaces them while
	// tests and the loop ask Running.
	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	exitErr  error
	starts   int
	restarts time.Time
	// ready is the last readiness the runner saw (probe passed).
	ready bool
}

// Pid is the process's id, 0 before it started.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Running reports whether the process is alive.
func (p *Proc) Running() bool {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// Start runs the runner against the API server cfg reaches (kubeconfig is
// the same admin user as a file, for the processes) until the test ends.
// bins is the folder of the binaries hack/testenv.sh builds.
func Start(t testing.TB, cfg *rest.Config, kubeconfig, bins string) *Runner {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	// The API server warns that FQDN EndpointSlices are deprecated; the
	// runner writes them on purpose (endpoints says why).
	cfg.WarningHandler = rest.NoWarnings{}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("runner: %v", err)
	}
	pins, err := versions.Get()
	if err != nil {
		t.Fatalf("runner: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Runner{
		t: t, cs: cs, cfg: cfg, kubeconfig: kubeconfig, bins: bins, dir: t.TempDir(), pins: pins,
		kick: make(chan struct{}, 1), stop: cancel, done: make(chan struct{}),
		procs: map[string]*Proc{}, handlers: map[string]Handler{}, podHandlers: map[string]PodHandler{},
		images: Images,
	}

	factory := informers.NewSharedInformerFactory(cs, 0)
	kickOn := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { r.Kick() },
		UpdateFunc: func(any, any) { r.Kick() },
		DeleteFunc: func(any) { r.Kick() },
	}
	for _, inf := range []cache.SharedIndexInformer{
		factory.Apps().V1().Deployments().Informer(),
		factory.Apps().V1().StatefulSets().Informer(),
		factory.Core().V1().Services().Informer(),
		factory.Core().V1().Secrets().Informer(),
	} {
		if _, err := inf.AddEventHandler(kickOn); err != nil {
			t.Fatalf("runner: %v", err)
		}
	}
	factory.Start(ctx.Done())

	go r.loop(ctx)
	t.Cleanup(r.Stop)
	return r
}

// Handle makes the runner call h for Deployments of the image named name
// (its last path element), instead of running a binary.
func (r *Runner) Handle(name string, h Handler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handlers[name] = h
	r.Kick()
}

// Run makes the runner run Deployments of im too (Labctl: labctl's own
// image, from a binary built from the checkout).
func (r *Runner) Run(im Image) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.images = append(slices.Clip(r.images), im)
	r.Kick()
}

// HandlePods makes the runner call h for Pods with a container of the
// image named name.
func (r *Runner) HandlePods(name string, h PodHandler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.podHandlers[name] = h
	r.Kick()
}

// Kick asks for a pass now.
func (r *Runner) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Stop stops every process and the runner; the test's cleanup calls it.
func (r *Runner) Stop() {
	r.stop()
	<-r.done
	r.mu.Lock()
	procs := make([]*Proc, 0, len(r.procs))
	for _, p := range r.procs {
		procs = append(procs, p.Pod...)
	}
	r.mu.Unlock()
	for _, p := range procs {
		r.kill(p)
		if p.sandbox != nil {
			p.sandbox.close()
		}
	}
	r.mu.Lock()
	for _, unlock := range r.portLocks {
		unlock()
	}
	r.portLocks = nil
	r.mu.Unlock()
	r.dropForwards(nil)
	r.nodeMu.Lock()
	if r.kubelet != nil {
		r.kubelet.close()
	}
	r.nodeMu.Unlock()
	if r.t.Failed() && len(procs) > 0 {
		// The test's temporary folder goes when the test ends; the logs
		// of a failed test are kept outside it.
		kept, err := os.MkdirTemp("", "labctl-runner-logs-")
		for _, p := range procs {
			where := p.Log
			if err == nil {
				if data, rerr := os.ReadFile(p.Log); rerr == nil {
					where = filepath.Join(kept, filepath.Base(p.Log))
					_ = os.WriteFile(where, data, 0o600)
				}
			}
			r.t.Logf("runner: %s (%s) log kept at %s, last lines:\n%s", p.Deployment, p.Image.Binary, where, Tail(p.Log, 40))
		}
	}
}

// Proc returns the process of Deployment namespace/name, or nil.
func (r *Runner) Proc(namespace, name string) *Proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.procs[namespace+"/"+name]
}

// Procs lists the processes running now, by Deployment.
func (r *Runner) Procs() map[string]*Proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]*Proc, len(r.procs))
	for k, p := range r.procs {
		out[k] = p
	}
	return out
}

// Logf logs to the test, as the runner and its handlers do.
func (r *Runner) Logf(format string, args ...any) { r.logf(format, args...) }

func (r *Runner) logf(format string, args ...any) {
	// t.Logf panics once the test has ended; the loop may outlive it by a
	// pass.
	defer func() { _ = recover() }()
	r.t.Logf("runner: "+format, args...)
}

func (r *Runner) loop(ctx context.Context) {
	defer close(r.done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		r.pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-tick.C:
		}
	}
}

// pass brings the processes in line with the Deployments, reports their
// status and points webhooks at them.
func (r *Runner) pass(ctx context.Context) {
	ds, err := r.cs.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
	if err != nil {
		if ctx.Err() == nil {
			r.logf("listing Deployments: %v", err)
		}
		return
	}
	seen := map[string]bool{}
	type status struct {
		d     *appsv1.Deployment
		ready bool
		why   string
	}
	var reports []status
	var zero []*appsv1.Deployment
	for i := range ds.Items {
		d := &ds.Items[i]
		key := d.Namespace + "/" + d.Name
		if d.DeletionTimestamp != nil {
			continue
		}
		if d.Spec.Replicas != nil && *d.Spec.Replicas == 0 {
			zero = append(zero, d)
			continue
		}
		if h, ok := r.handler(d); ok {
			seen[key] = true
			ready, why := h(ctx, d)
			reports = append(reports, status{d, ready, why})
			continue
		}
		cs := r.containers(d)
		if len(cs) == 0 {
			continue
		}
		seen[key] = true
		ready, why := r.ensure(ctx, d, cs)
		reports = append(reports, status{d, ready, why})
	}
	r.statefulPods(ctx, seen)
	r.mu.Lock()
	var gone []*Proc
	for k, p := range r.procs {
		if !seen[k] {
			gone = append(gone, p)
			delete(r.procs, k)
		}
	}
	r.mu.Unlock()
	for _, p := range gone {
		r.logf("%s is gone (or scaled to 0): stopping %s", p.Deployment, p.binaries())
		r.killPod(p)
	}
	// A Deployment scaled to 0 has no pod once its processes are gone,
	// and its status says so, as the deployment controller's does.
	for _, d := range zero {
		r.report(ctx, d, 0, true, "")
	}
	r.pods(ctx)
	// The Services lead to the ready processes before their Deployments
	// say Available, so a client waiting for Available finds the webhooks
	// answering.
	r.endpoints(ctx)
	for _, st := range reports {
		r.report(ctx, st.d, 1, st.ready, st.why)
	}
}

// pods plays the kubelet for Pods of the images PodHandlers take: it runs
// the handler and reports the phase it returns, with the container's
// state, as kubelet's status manager would.
func (r *Runner) pods(ctx context.Context) {
	r.mu.Lock()
	n := len(r.podHandlers)
	r.mu.Unlock()
	if n == 0 {
		return
	}
	pods, err := r.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || p.DeletionTimestamp != nil || ownedByStatefulSet(p) {
			continue
		}
		var h PodHandler
		var c corev1.Container
		r.mu.Lock()
		for _, cc := range p.Spec.Containers {
			if ph, ok := r.podHandlers[imageName(cc.Image)]; ok {
				h, c = ph, cc
			}
		}
		r.mu.Unlock()
		if h == nil {
			continue
		}
		phase, msg := h(ctx, p)
		if phase == p.Status.Phase {
			continue
		}
		now := metav1.Now()
		st := corev1.ContainerStatus{Name: c.Name, Image: c.Image}
		switch phase {
		case corev1.PodSucceeded, corev1.PodFailed:
			code, reason := int32(0), "Completed"
			if phase == corev1.PodFailed {
				code, reason = 1, "Error"
			}
			st.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: msg, StartedAt: now, FinishedAt: now}
		default:
			started := true
			st.Started = &started
			st.State.Running = &corev1.ContainerStateRunning{StartedAt: now}
		}
		p = p.DeepCopy()
		p.Status.Phase = phase
		p.Status.Message = msg
		p.Status.StartTime = &now
		p.Status.PodIP, p.Status.HostIP = "127.0.0.1", "127.0.0.1"
		p.Status.ContainerStatuses = []corev1.ContainerStatus{st}
		if _, err := r.cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			r.logf("reporting Pod %s/%s %s: %v", p.Namespace, p.Name, phase, err)
			continue
		}
		r.logf("Pod %s/%s is %s: %s", p.Namespace, p.Name, phase, msg)
	}
}

func (r *Runner) handler(d *appsv1.Deployment) (Handler, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range d.Spec.Template.Spec.Containers {
		if h, ok := r.handlers[imageName(c.Image)]; ok {
			return h, true
		}
	}
	return nil, false
}

// known is a container the runner runs, and its image.
type known struct {
	c  corev1.Container
	im Image
}

// containers picks the Deployment's containers running a known image.
// Other containers (sidecars such as kube-rbac-proxy) are not run.
func (r *Runner) containers(d *appsv1.Deployment) []known {
	r.mu.Lock()
	images := r.images
	r.mu.Unlock()
	var out []known
	for _, c := range d.Spec.Template.Spec.Containers {
		if im, ok := match(c.Image, r.pins, images); ok {
			out = append(out, known{c, im})
		}
	}
	return out
}

// binaries names the pod's binaries, for logs.
func (p *Proc) binaries() string {
	names := make([]string, 0, len(p.Pod))
	for _, q := range p.Pod {
		names = append(names, q.Image.Binary)
	}
	return strings.Join(names, ", ")
}

func imageName(image string) string {
	ref := image
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref[strings.LastIndex(ref, "/")+1:]
}

// ensure keeps a process running for each of the pod's known containers,
// from the Deployment's current spec, and says whether the pod is ready
// (every process running, every readiness probe passing). A container
// whose process exits is started again on its own, as kubelet restarts a
// container.
func (r *Runner) ensure(ctx context.Context, d *appsv1.Deployment, cs []known) (bool, string) {
	key := d.Namespace + "/" + d.Name
	spec := specHash(d)
	r.mu.Lock()
	p := r.procs[key]
	r.mu.Unlock()
	if p != nil && p.spec != spec {
		r.logf("Deployment %s changed: restarting %s", key, p.binaries())
		r.killPod(p)
		r.mu.Lock()
		delete(r.procs, key)
		r.mu.Unlock()
		p = nil
	}
	if p != nil {
		for _, q := range p.Pod {
			if q.Running() {
				continue
			}
			if time.Since(q.restarts) < backoff(q.starts) {
				return false, fmt.Sprintf("%s exited (%v); restarting (back-off)", q.Image.Binary, q.exitError())
			}
			r.logf("%s of Deployment %s exited (%v): starting it again", q.Image.Binary, key, q.exitError())
			if err := r.launch(q); err != nil {
				return false, err.Error()
			}
		}
	}
	for _, k := range cs {
		if k.im.OwnNetwork {
			continue // its FixedPorts are its network's alone
		}
		if why := r.lockPorts(k.im.Binary, k.im.FixedPorts, "hard-codes"); why != "" {
			return false, why
		}
	}
	if p == nil {
		pod, err := r.preparePod(ctx, d, cs, spec)
		if err != nil {
			return false, err.Error()
		}
		for _, q := range pod {
			if err := r.launch(q); err != nil {
				r.killPod(pod[0])
				return false, err.Error()
			}
		}
		r.mu.Lock()
		r.procs[key] = pod[0]
		r.mu.Unlock()
		p = pod[0]
	}
	ready, why := true, ""
	for _, q := range p.Pod {
		if !q.Running() {
			ready, why = false, fmt.Sprintf("%s exited: %v", q.Image.Binary, q.exitError())
			break
		}
		if err := probe(q.container.ReadinessProbe, q); err != nil {
			ready, why = false, q.Container+" readiness probe: "+err.Error()
			break
		}
	}
	p.ready = ready
	return ready, why
}

// lockPorts takes the machine-wide lock (testbed.TryLockPort) on each
// port a binary binds as it is, with no flag moving it, once per runner;
// the reason it waits is "" once all are held.
func (r *Runner) lockPorts(binary string, ports []int, how string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, port := range ports {
		if r.portLocks[port] != nil {
			continue
		}
		unlock, ok, err := testbed.TryLockPort(port)
		if err != nil {
			return err.Error()
		}
		if !ok {
			return fmt.Sprintf("waiting for port %d, which %s %s, held by another test", port, binary, how)
		}
		if r.portLocks == nil {
			r.portLocks = map[int]func(){}
		}
		r.portLocks[port] = unlock
	}
	return ""
}

func backoff(starts int) time.Duration {
	d := time.Duration(starts) * time.Second
	if d > 10*time.Second {
		d = 10 * time.Second
	}
	return d
}

// specHash names what a process is started from: the pod template.
func specHash(d *appsv1.Deployment) string {
	data, _ := json.Marshal(d.Spec.Template)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// preparePod prepares a process per known container. A lone container's
// folder and log are the pod's (<namespace>_<name>); with several, each
// container has a folder of its own inside the pod's and a log
// <namespace>_<name>_<container>.log. emptyDir volumes are then not shared
// between the containers (none of the pods run here shares one).
func (r *Runner) preparePod(ctx context.Context, d *appsv1.Deployment, cs []known, spec string) ([]*Proc, error) {
	base := d.Namespace + "_" + d.Name
	podRoot := filepath.Join(r.dir, base)
	if err := os.RemoveAll(podRoot); err != nil {
		return nil, err
	}
	var pod []*Proc
	for _, k := range cs {
		root, log := podRoot, filepath.Join(r.dir, base+".log")
		if len(cs) > 1 {
			root, log = filepath.Join(podRoot, k.c.Name), filepath.Join(r.dir, base+"_"+k.c.Name+".log")
		}
		p, err := r.prepare(ctx, d, k.c, k.im, spec, root, log)
		if err != nil {
			return nil, err
		}
		pod = append(pod, p)
	}
	pod[0].Pod = pod
	return pod, nil
}

// prepare makes the process's folder, files, ports and command line.
func (r *Runner) prepare(ctx context.Context, d *appsv1.Deployment, c corev1.Container, im Image, spec, root, log string) (*Proc, error) {
	bin := im.Binary
	if !filepath.IsAbs(bin) {
		bin = filepath.Join(r.bins, im.Binary)
	}
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() {
		return nil, fmt.Errorf("%s is missing: build it with 'hack/testenv.sh controllers'", bin)
	}
	if err := os.MkdirAll(filepath.Join(root, "tmp"), 0o700); err != nil {
		return nil, err
	}
	mounts, err := r.files(ctx, d, c, root)
	if err != nil {
		return nil, err
	}
	env, err := r.env(ctx, d, c, root)
	if err != nil {
		return nil, err
	}
	args, ports, err := commandLine(c, im, mounts, root, env, r.reservePort)
	if err != nil {
		return nil, fmt.Errorf("Deployment %s/%s container %s: %w", d.Namespace, d.Name, c.Name, err)
	}
	if why := missingRequired(args, im); why != "" {
		return nil, fmt.Errorf("Deployment %s/%s container %s: %s", d.Namespace, d.Name, c.Name, why)
	}
	var kept []int
	for flagName, def := range im.PodPorts {
		if n, ok := portFlag(args, flagName, def); ok {
			kept = append(kept, n)
		}
	}
	for _, flagName := range im.KeepURLs {
		v, _ := flagValue(args, flagName)
		kept = append(kept, urlPorts(v)...)
	}
	if why := r.lockPorts(im.Binary, kept, "keeps (the pod's other containers dial it)"); why != "" {
		return nil, errors.New(why)
	}
	p := &Proc{
		Deployment: d.Namespace + "/" + d.Name, Container: c.Name, Image: im, Log: log,
		Ports: ports, Args: args, container: c, spec: spec, labels: d.Spec.Template.Labels,
		hostname: d.Spec.Template.Spec.Hostname, subdomain: d.Spec.Template.Spec.Subdomain,
	}
	if d.Annotations[podNameAnnotation] != "" {
		p.podUID = d.UID
	}
	p.cmd = &exec.Cmd{Path: bin, Args: append([]string{bin}, args...), Dir: root, Env: env}
	if im.Hosts {
		if p.cmd, err = r.withHosts(p.cmd); err != nil {
			return nil, fmt.Errorf("Deployment %s/%s container %s: %w", d.Namespace, d.Name, c.Name, err)
		}
	}
	if im.OwnNetwork {
		if err := r.sandboxed(p); err != nil {
			return nil, fmt.Errorf("Deployment %s/%s container %s: %w", d.Namespace, d.Name, c.Name, err)
		}
	}
	return p, nil
}

// sandboxed moves p into a network namespace of its own: each of its
// ports exposed on the machine's loopback (a moved listener on the same
// port, a fixed one on a free port), the API server and the ports the
// runner reaches reached from inside.
func (r *Runner) sandboxed(p *Proc) error {
	sb, err := newSandbox()
	if err != nil {
		return err
	}
	fail := func(err error) error { sb.close(); return err }
	for _, local := range p.Ports {
		if err := sb.expose(local, local); err != nil {
			return fail(err)
		}
	}
	for _, port := range p.Image.FixedPorts {
		local, err := r.reservePort()
		if err != nil {
			return fail(err)
		}
		if err := sb.expose(local, port); err != nil {
			return fail(err)
		}
		p.Ports[int32(port)] = local
	}
	u, err := url.Parse(r.cfg.Host)
	if err != nil {
		return fail(fmt.Errorf("the API server's address %s: %w", r.cfg.Host, err))
	}
	apiPort, _ := strconv.Atoi(u.Port())
	r.mu.Lock()
	ports := []int{apiPort}
	for port := range r.reach {
		ports = append(ports, port)
	}
	r.mu.Unlock()
	for _, port := range ports {
		if err := sb.reach(port); err != nil {
			return fail(err)
		}
	}
	if p.cmd, err = sb.join(p.cmd); err != nil {
		return fail(err)
	}
	p.sandbox = sb
	return nil
}

// Reach makes these ports of the machine's loopback reachable, on the
// same ports, from the processes in networks of their own
// (Image.OwnNetwork): a datastore a test runs beside the box. The
// Services the hosts file names are reached without it.
func (r *Runner) Reach(ports ...int) {
	r.mu.Lock()
	if r.reach == nil {
		r.reach = map[int]bool{}
	}
	for _, port := range ports {
		r.reach[port] = true
	}
	procs := make([]*Proc, 0, len(r.procs))
	for _, p := range r.procs {
		procs = append(procs, p.Pod...)
	}
	r.mu.Unlock()
	for _, p := range procs {
		if p.sandbox == nil {
			continue
		}
		for _, port := range ports {
			if err := p.sandbox.reach(port); err != nil {
				r.logf("%s: %v", p, err)
			}
		}
	}
}

// launch starts (or starts again) the process; its output goes to its log.
func (r *Runner) launch(p *Proc) error {
	f, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := &exec.Cmd{Path: p.cmd.Path, Args: p.cmd.Args, Dir: p.cmd.Dir, Env: p.cmd.Env, Stdout: f, Stderr: f}
	fmt.Fprintf(f, "--- runner: starting %s %s\n", p.Image.Binary, strings.Join(p.Args, " "))
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("starting %s: %w", p.Image.Binary, err)
	}
	exited := make(chan struct{})
	p.mu.Lock()
	p.cmd = cmd
	p.exited = exited
	p.exitErr = nil
	p.mu.Unlock()
	p.starts++
	p.restarts = time.Now()
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(exited)
		r.Kick()
	}()
	r.logf("Deployment %s: started %s (pid %d, log %s)", p.Deployment, p.Image.Binary, cmd.Process.Pid, p.Log)
	return nil
}

// killPod stops every process of p's pod, and their network namespaces.
func (r *Runner) killPod(p *Proc) {
	for _, q := range p.Pod {
		r.kill(q)
		if q.sandbox != nil {
			q.sandbox.close()
		}
	}
}

// kill stops a process: SIGTERM, then SIGKILL after 10 s.
func (r *Runner) kill(p *Proc) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil || !p.Running() {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// exitError is how the process last ended.
func (p *Proc) exitError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

// env is the process's environment: the container's env and envFrom, the
// downward API fields a manager reads, and what replaces the in-cluster
// config. Nothing of the test's own environment leaks in but PATH.
func (r *Runner) env(ctx context.Context, d *appsv1.Deployment, c corev1.Container, root string) ([]string, error) {
	vals := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	for _, from := range c.EnvFrom {
		var data map[string]string
		switch {
		case from.SecretRef != nil:
			s, err := r.cs.CoreV1().Secrets(d.Namespace).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
			if err != nil {
				if apierrors.IsNotFound(err) && from.SecretRef.Optional != nil && *from.SecretRef.Optional {
					continue
				}
				return nil, fmt.Errorf("waiting for Secret %s/%s (envFrom): %w", d.Namespace, from.SecretRef.Name, err)
			}
			data = map[string]string{}
			for k, v := range s.Data {
				data[k] = string(v)
			}
		case from.ConfigMapRef != nil:
			cm, err := r.cs.CoreV1().ConfigMaps(d.Namespace).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
			if err != nil {
				if apierrors.IsNotFound(err) && from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional {
					continue
				}
				return nil, fmt.Errorf("waiting for ConfigMap %s/%s (envFrom): %w", d.Namespace, from.ConfigMapRef.Name, err)
			}
			data = cm.Data
		}
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			set(from.Prefix+k, data[k])
		}
	}
	podName := d.Name + "-runner"
	if n := d.Annotations[podNameAnnotation]; n != "" {
		podName = n
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expand(e.Value, vals))
			continue
		}
		switch vf := e.ValueFrom; {
		case vf.FieldRef != nil:
			switch vf.FieldRef.FieldPath {
			case "metadata.namespace":
				set(e.Name, d.Namespace)
			case "metadata.name":
				set(e.Name, podName)
			case "metadata.uid":
				set(e.Name, string(d.UID))
			case "status.podIP", "status.hostIP":
				set(e.Name, "127.0.0.1")
			case "spec.nodeName":
				// A StatefulSet's Pod is bound to the runner's Node; a
				// Deployment's process stands for a Pod never written.
				node := d.Spec.Template.Spec.NodeName
				if node == "" {
					node = "runner"
				}
				set(e.Name, node)
			case "spec.serviceAccountName":
				set(e.Name, d.Spec.Template.Spec.ServiceAccountName)
			default:
				return nil, fmt.Errorf("env %s: the runner does not know fieldRef %s", e.Name, vf.FieldRef.FieldPath)
			}
		case vf.SecretKeyRef != nil:
			s, err := r.cs.CoreV1().Secrets(d.Namespace).Get(ctx, vf.SecretKeyRef.Name, metav1.GetOptions{})
			if err != nil || s.Data[vf.SecretKeyRef.Key] == nil {
				if vf.SecretKeyRef.Optional != nil && *vf.SecretKeyRef.Optional {
					continue
				}
				return nil, fmt.Errorf("waiting for Secret %s/%s key %s (env %s): %v", d.Namespace, vf.SecretKeyRef.Name, vf.SecretKeyRef.Key, e.Name, err)
			}
			set(e.Name, string(s.Data[vf.SecretKeyRef.Key]))
		case vf.ConfigMapKeyRef != nil:
			cm, err := r.cs.CoreV1().ConfigMaps(d.Namespace).Get(ctx, vf.ConfigMapKeyRef.Name, metav1.GetOptions{})
			v, ok := "", false
			if err == nil {
				v, ok = cm.Data[vf.ConfigMapKeyRef.Key]
			}
			if !ok {
				if vf.ConfigMapKeyRef.Optional != nil && *vf.ConfigMapKeyRef.Optional {
					continue
				}
				return nil, fmt.Errorf("waiting for ConfigMap %s/%s key %s (env %s): %v", d.Namespace, vf.ConfigMapKeyRef.Name, vf.ConfigMapKeyRef.Key, e.Name, err)
			}
			set(e.Name, v)
		case vf.ResourceFieldRef != nil:
			set(e.Name, "0")
		}
	}
	out := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + root, "TMPDIR=" + filepath.Join(root, "tmp"), "KUBECONFIG=" + r.kubeconfig}
	for _, k := range order {
		out = append(out, k+"="+vals[k])
	}
	return out, nil
}

// expand does kubelet's $(VAR) expansion of env values and args against
// the variables defined so far; $$ is a literal $.
func expand(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			if j := strings.IndexByte(s[i:], ')'); j > 0 {
				name := s[i+2 : i+j]
				if v, ok := vars[name]; ok {
					b.WriteString(v)
					i += j
					continue
				}
			}
			b.WriteByte('$')
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// mount is a container path and where it lives for the process.
type mount struct{ path, local string }

// files writes the volumes the container mounts into root, each at its
// mountPath under root.
func (r *Runner) files(ctx context.Context, d *appsv1.Deployment, c corev1.Container, root string) ([]mount, error) {
	vols := map[string]corev1.Volume{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		vols[v.Name] = v
	}
	var out []mount
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok {
			return nil, fmt.Errorf("volumeMount %s names no volume", m.Name)
		}
		local := filepath.Join(root, filepath.FromSlash(m.MountPath))
		files := map[string][]byte{}
		switch {
		case v.Secret != nil:
			got, err := r.secretFiles(ctx, d.Namespace, v.Secret.SecretName, v.Secret.Optional, v.Secret.Items, v.Name)
			if err != nil {
				return nil, err
			}
			files = got
		case v.ConfigMap != nil:
			got, err := r.configMapFiles(ctx, d.Namespace, v.ConfigMap.Name, v.ConfigMap.Optional, v.ConfigMap.Items, v.Name)
			if err != nil {
				return nil, err
			}
			files = got
		case v.Projected != nil:
			// Each source's files side by side in one folder, as kubelet's
			// projected volume writes them (a TenantControlPlane's
			// /etc/kubernetes/pki: seven Secrets).
			for _, src := range v.Projected.Sources {
				var got map[string][]byte
				var err error
				switch {
				case src.Secret != nil:
					got, err = r.secretFiles(ctx, d.Namespace, src.Secret.Name, src.Secret.Optional, src.Secret.Items, v.Name)
				case src.ConfigMap != nil:
					got, err = r.configMapFiles(ctx, d.Namespace, src.ConfigMap.Name, src.ConfigMap.Optional, src.ConfigMap.Items, v.Name)
				default:
					// Service account tokens and the downward API: the
					// process uses the kubeconfig instead.
					r.logf("Deployment %s/%s: a source of projected volume %s is not made (only its Secrets and ConfigMaps are)", d.Namespace, d.Name, v.Name)
				}
				if err != nil {
					return nil, err
				}
				maps.Copy(files, got)
			}
		case v.EmptyDir != nil:
		case v.PersistentVolumeClaim != nil:
			dir, err := r.claimFolder(d.Namespace, v.PersistentVolumeClaim.ClaimName)
			if err != nil {
				return nil, err
			}
			out = append(out, mount{path: m.MountPath, local: dir})
			continue
		default:
			// Projected service account tokens and the like: the process
			// uses the kubeconfig instead.
			r.logf("Deployment %s/%s: volume %s is not made (only Secret, ConfigMap, projected and emptyDir volumes are)", d.Namespace, d.Name, v.Name)
		}
		if m.SubPath != "" {
			data, ok := files[m.SubPath]
			if !ok {
				return nil, fmt.Errorf("volumeMount %s: subPath %s is not in volume %s", m.Name, m.SubPath, v.Name)
			}
			if err := writeFile(local, data); err != nil {
				return nil, err
			}
		} else {
			if err := os.MkdirAll(local, 0o700); err != nil {
				return nil, err
			}
			for name, data := range files {
				if err := writeFile(filepath.Join(local, filepath.FromSlash(name)), data); err != nil {
					return nil, err
				}
			}
		}
		out = append(out, mount{path: m.MountPath, local: local})
	}
	return out, nil
}

// secretFiles are a Secret's keys as a volume holds them (only items,
// renamed, when items are given). A Secret that does not exist yet is
// waited for, as kubelet waits, unless it is optional.
func (r *Runner) secretFiles(ctx context.Context, ns, name string, optional *bool, items []corev1.KeyToPath, vol string) (map[string][]byte, error) {
	s, err := r.cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) && optional != nil && *optional {
			return nil, nil
		}
		return nil, fmt.Errorf("waiting for Secret %s/%s (volume %s): %w", ns, name, vol, err)
	}
	return pick(s.Data, items, optional, "Secret "+ns+"/"+name, vol)
}

// configMapFiles are secretFiles for a ConfigMap, binaryData too.
func (r *Runner) configMapFiles(ctx context.Context, ns, name string, optional *bool, items []corev1.KeyToPath, vol string) (map[string][]byte, error) {
	cm, err := r.cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) && optional != nil && *optional {
			return nil, nil
		}
		return nil, fmt.Errorf("waiting for ConfigMap %s/%s (volume %s): %w", ns, name, vol, err)
	}
	files := map[string][]byte{}
	for k, s := range cm.Data {
		files[k] = []byte(s)
	}
	maps.Copy(files, cm.BinaryData)
	return pick(files, items, optional, "ConfigMap "+ns+"/"+name, vol)
}

// pick keeps the items' keys, at their paths; all keys when there are no
// items. An item whose key is not there yet is waited for, unless the
// source is optional, as kubelet's secret and configMap volumes
// (MakePayload: "references non-existent secret key") wait: the
// kamaji-etcd chart makes its certificates' Secrets empty, and
// cert-manager fills them later.
func pick(files map[string][]byte, items []corev1.KeyToPath, optional *bool, what, vol string) (map[string][]byte, error) {
	if len(items) == 0 {
		return files, nil
	}
	picked := map[string][]byte{}
	for _, it := range items {
		data, ok := files[it.Key]
		if !ok {
			if optional != nil && *optional {
				continue
			}
			return nil, fmt.Errorf("waiting for key %s of %s (volume %s)", it.Key, what, vol)
		}
		picked[it.Path] = data
	}
	return picked, nil
}

func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	// Secrets and ConfigMaps alike: 0600, never looser.
	return os.WriteFile(path, data, 0o600)
}

// commandLine is the container's args (after its command's first element,
// which the binary replaces), $(VAR)-expanded, with mounted paths mapped
// and every listener moved to a free loopback port. It returns the map of
// the container's ports to the local ones.
func commandLine(c corev1.Container, im Image, mounts []mount, root string, env []string, freePort func() (int, error)) ([]string, map[int32]int, error) {
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	var args []string
	if len(c.Command) > 1 {
		args = append(args, c.Command[1:]...)
	}
	args = append(args, c.Args...)
	for i := range args {
		args[i] = mapArg(expand(args[i], vars), mounts)
	}
	ports := map[int32]int{}
	for flagName, def := range im.Addrs {
		val, idx := flagValue(args, flagName)
		if idx < 0 {
			val = def
		}
		p, ok := portOf(val)
		if !ok {
			continue // disabled (empty or port 0)
		}
		local, err := freePort()
		if err != nil {
			return nil, nil, err
		}
		ports[int32(p)] = local
		args = setFlag(args, flagName, idx, "127.0.0.1:"+strconv.Itoa(local))
	}
	for _, flagName := range im.BindHosts {
		_, idx := flagValue(args, flagName)
		args = setFlag(args, flagName, idx, "127.0.0.1")
	}
	for flagName, def := range im.PodPorts {
		if p, ok := portFlag(args, flagName, def); ok {
			ports[int32(p)] = p
		}
	}
	for _, flagName := range im.KeepURLs {
		v, idx := flagValue(args, flagName)
		if idx < 0 {
			continue
		}
		moved, err := loopbackURLs(v)
		if err != nil {
			return nil, nil, fmt.Errorf("--%s: %w", flagName, err)
		}
		args = setFlag(args, flagName, idx, moved)
		for _, p := range urlPorts(moved) {
			ports[int32(p)] = p
		}
	}
	for flagName, def := range im.Ports {
		p, ok := portFlag(args, flagName, def)
		if !ok {
			continue
		}
		local, err := freePort()
		if err != nil {
			return nil, nil, err
		}
		ports[int32(p)] = local
		_, idx := flagValue(args, flagName)
		args = setFlag(args, flagName, idx, strconv.Itoa(local))
	}
	if im.CRLeaderElection {
		if v, idx := flagValue(args, "leader-elect"); idx >= 0 && v != "false" {
			args[idx] = "--leader-elect=false"
		}
	}
	if im.InClusterFlag != "" {
		if _, idx := flagValue(args, im.InClusterFlag); idx < 0 {
			args = append(args, "--"+im.InClusterFlag+"="+vars["KUBECONFIG"])
		}
	}
	if im.CertDir != "" {
		if _, idx := flagValue(args, im.CertDir); idx < 0 {
			args = append(args, "--"+im.CertDir+"="+mapPaths(im.CertDirDefault, mounts))
		}
	}
	return args, ports, nil
}

// missingRequired says which of im.Requires args lack, "" when none.
func missingRequired(args []string, im Image) string {
	for _, req := range im.Requires {
		if _, idx := flagValue(args, strings.TrimPrefix(req, "--")); idx < 0 {
			return fmt.Sprintf("the runner does not start %s without %s (runner.Image.Requires says why)", im.Binary, req)
		}
	}
	return ""
}

// portFlag is the port a flag holding a bare port names, or its default;
// ok is false when it is disabled (0) or not a number.
func portFlag(args []string, name, def string) (int, bool) {
	val, idx := flagValue(args, name)
	if idx < 0 {
		val = def
	}
	p, err := strconv.Atoi(val)
	return p, err == nil && p > 0
}

// flagValue finds --name=value or --name value (one dash too, as pflag
// and Go's flag take both); idx is the index of the flag, -1 if absent.
func flagValue(args []string, name string) (string, int) {
	for i, a := range args {
		for _, p := range []string{"--", "-"} {
			if v, ok := strings.CutPrefix(a, p+name+"="); ok {
				return v, i
			}
			if a == p+name && i+1 < len(args) {
				return args[i+1], i
			}
		}
	}
	return "", -1
}

// setFlag sets the flag at idx (or appends it) to value, in = form.
func setFlag(args []string, name string, idx int, value string) []string {
	if idx < 0 {
		return append(args, "--"+name+"="+value)
	}
	if !strings.Contains(args[idx], "=") {
		// --name value: drop the separate value.
		args = append(args[:idx+1], args[idx+2:]...)
	}
	args[idx] = "--" + name + "=" + value
	return args
}

func portOf(addr string) (int, bool) {
	if addr == "" || addr == "0" {
		return 0, false
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, false
	}
	p, err := strconv.Atoi(port)
	return p, err == nil && p > 0
}

// loopbackURLs moves each listen URL of a comma-separated list onto
// 127.0.0.1, keeping its scheme and port.
func loopbackURLs(list string) (string, error) {
	var out []string
	for _, raw := range strings.Split(list, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || u.Port() == "" {
			return "", fmt.Errorf("%q is not a listen URL with a port", raw)
		}
		u.Host = net.JoinHostPort("127.0.0.1", u.Port())
		out = append(out, u.String())
	}
	return strings.Join(out, ","), nil
}

// urlPorts are the ports of a comma-separated list of URLs.
func urlPorts(list string) []int {
	var out []int
	for _, raw := range strings.Split(list, ",") {
		if u, err := url.Parse(strings.TrimSpace(raw)); err == nil {
			if p, err := strconv.Atoi(u.Port()); err == nil && p > 0 {
				out = append(out, p)
			}
		}
	}
	return out
}

// mapArg maps a path in one argument: the whole argument (a value after
// its flag, or a positional one), or the value of --name=value, as
// --proxmox-root-cert-file=/etc/labctl/proxmox-ca/ca.crt names a file of
// a mount.
func mapArg(a string, mounts []mount) string {
	if name, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(name, "-") {
		return name + "=" + mapPaths(v, mounts)
	}
	return mapPaths(a, mounts)
}

// mapPaths maps a value naming a mounted path (or lying under one) into
// the process's folder.
func mapPaths(v string, mounts []mount) string {
	best := -1
	for i, m := range mounts {
		base := strings.TrimSuffix(m.path, "/")
		if (v == base || strings.HasPrefix(v, base+"/")) && (best < 0 || len(base) > len(mounts[best].path)) {
			best = i
		}
	}
	if best < 0 {
		return v
	}
	m := mounts[best]
	return m.local + strings.TrimPrefix(v, strings.TrimSuffix(m.path, "/"))
}

// reservePort reserves a loopback port (testbed.ReservePort) until Stop.
func (r *Runner) reservePort() (int, error) {
	p, release, err := testbed.ReservePort()
	if err != nil {
		return 0, fmt.Errorf("finding a free loopback port: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.portLocks == nil {
		r.portLocks = map[int]func(){}
	}
	r.portLocks[p] = release
	return p, nil
}

// localPort maps a container port (a number or a port name) of p's
// container to where the process listens.
func (p *Proc) localPort(port intstr.IntOrString) (int, bool) {
	return localPort([]*Proc{p}, port)
}

// localPort maps a port of the pod (a number, or a port name of one of its
// containers: they share the pod's network) to where its process listens;
// a number no process moved is where it is.
func localPort(pod []*Proc, port intstr.IntOrString) (int, bool) {
	n := port.IntVal
	if port.Type == intstr.String {
		found := false
		for _, q := range pod {
			for _, cp := range q.container.Ports {
				if cp.Name == port.StrVal {
					n, found = cp.ContainerPort, true
				}
			}
		}
		if !found {
			return 0, false
		}
	}
	for _, q := range pod {
		if l, ok := q.Ports[n]; ok {
			return l, true
		}
	}
	return int(n), true
}

var probeClient = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
	// The probe is kubelet's: it does not verify the serving certificate.
	TLSClientConfig: insecureTLS(),
}}

// probe runs an HTTP readiness probe against the process, on loopback.
func probe(pr *corev1.Probe, p *Proc) error {
	if pr == nil || pr.HTTPGet == nil {
		return nil
	}
	port, ok := p.localPort(pr.HTTPGet.Port)
	if !ok {
		return fmt.Errorf("port %s is not a container port", pr.HTTPGet.Port.String())
	}
	scheme := "http"
	if pr.HTTPGet.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	resp, err := probeClient.Get(scheme + "://127.0.0.1:" + strconv.Itoa(port) + pr.HTTPGet.Path)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("GET %s: %s", pr.HTTPGet.Path, resp.Status)
	}
	return nil
}

// report writes the Deployment's status as the deployment controller
// would from n pods (the runner runs one, or none at 0 replicas, which
// counts as available as the controller's minimum-availability rule
// has it): replicas and available counts, and the Available and
// Progressing conditions. It writes only when something changed.
func (r *Runner) report(ctx context.Context, d *appsv1.Deployment, n int32, ready bool, why string) {
	st := appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n}
	avail := appsv1.DeploymentCondition{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionFalse,
		Reason: "MinimumReplicasUnavailable", Message: "Deployment does not have minimum availability. (labctl test bed runner: " + why + ")"}
	if ready {
		st.ReadyReplicas, st.AvailableReplicas = n, n
		avail = appsv1.DeploymentCondition{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue,
			Reason: "MinimumReplicasAvailable", Message: "Deployment has minimum availability."}
	} else {
		st.UnavailableReplicas = n
	}
	prog := appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue,
		Reason: "NewReplicaSetAvailable", Message: "run by the labctl test bed runner"}
	if !ready {
		prog.Reason = "ReplicaSetUpdated"
	}
	old := d.Status
	same := old.ObservedGeneration == st.ObservedGeneration && old.Replicas == st.Replicas &&
		old.ReadyReplicas == st.ReadyReplicas && old.AvailableReplicas == st.AvailableReplicas &&
		old.UpdatedReplicas == st.UpdatedReplicas && old.UnavailableReplicas == st.UnavailableReplicas &&
		sameCond(old.Conditions, avail) && sameCond(old.Conditions, prog)
	if same {
		return
	}
	now := metav1.Now()
	for _, c := range []*appsv1.DeploymentCondition{&avail, &prog} {
		c.LastUpdateTime, c.LastTransitionTime = now, now
		for _, o := range old.Conditions {
			if o.Type == c.Type && o.Status == c.Status {
				c.LastTransitionTime = o.LastTransitionTime
			}
		}
	}
	st.Conditions = []appsv1.DeploymentCondition{avail, prog}
	d = d.DeepCopy()
	d.Status = st
	if _, err := r.cs.AppsV1().Deployments(d.Namespace).UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
		if ctx.Err() == nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			r.logf("reporting Deployment %s/%s status: %v", d.Namespace, d.Name, err)
		}
		r.Kick()
		return
	}
	if ready {
		r.logf("Deployment %s/%s is Available", d.Namespace, d.Name)
	} else {
		r.logf("Deployment %s/%s is not Available: %s", d.Namespace, d.Name, why)
	}
}

func sameCond(conds []appsv1.DeploymentCondition, want appsv1.DeploymentCondition) bool {
	for _, c := range conds {
		if c.Type == want.Type {
			return c.Status == want.Status && c.Reason == want.Reason && c.Message == want.Message
		}
	}
	return false
}

// Tail is the last n lines of a log file.
func Tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return TailLines(string(data), n)
}

// TailLines is the last n lines of s, for a log kept in memory.
func TailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// String is for logs.
func (p *Proc) String() string { return fmt.Sprintf("%s (%s)", p.Deployment, p.Image.Binary) }
