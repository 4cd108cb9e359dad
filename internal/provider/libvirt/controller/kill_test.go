package controller_test

// The provider killed between any two of its libvirt calls: it runs as a
// process of its own (this test binary, re-executed as the provider: the
// same controller.Run 'labctl provider libvirt' runs), which a
// libvirttest.Cutter kills with SIGKILL in place of sending the libvirt
// call after its N-th. Started again, it must converge: one domain,
// nothing leaked. It runs as the provider's ServiceAccount, as the other
// tests do. The hosts are the test's fast libvirtd (test driver), so every
// N can be tried; the real VM boots in TestRealVMMachineDeployment.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/hypervisor/libvirt"
	"github.com/labctl/labctl/internal/provider/libvirt/api/v1alpha1"
	"github.com/labctl/labctl/internal/provider/libvirt/controller"
	"github.com/labctl/labctl/internal/testing/libvirttest"
	"github.com/labctl/labctl/internal/testing/testbed"
)

// childEnv carries a childConfig (JSON) to the re-executed test binary.
const childEnv = "LABCTL_TEST_PROVIDER_CHILD"

type childConfig struct {
	Kubeconfig string
	Namespace  string
	// CutAfter kills the provider in place of its machine reconciler's
	// libvirt call CutAfter+1; zero never does.
	CutAfter int
	// CutBefore, when not zero, kills it in place of its machine
	// reconciler's first call of this libvirt procedure instead.
	CutBefore uint32
	// StreamUploads keeps libvirt's volume streams (a real libvirtd);
	// else seeds are read and dropped (the test driver has no streams).
	StreamUploads bool
}

// cutMark starts the line a child prints just before it kills itself;
// callsMark the one it prints when stopped: the procedures its machine
// reconciler called.
const (
	cutMark   = "CUT after libvirt call "
	callsMark = "CALLS "
)

// runChild is the provider process: controller.Run until SIGTERM, or
// killed by its Cutter.
func runChild(raw string) int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cut := &libvirttest.Cutter{After: cfg.CutAfter, Before: cfg.CutBefore}
	cut.Cut = func(proc uint32) {
		fmt.Fprintf(os.Stderr, "%s%d, before procedure %d\n", cutMark, cut.Calls(), proc)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	err := controller.Run(ctx, controller.Options{
		Kubeconfig: cfg.Kubeconfig, Namespace: cfg.Namespace, HealthAddr: "0", Concurrency: 1,
		Tune: func(r *controller.Reconcilers) {
			r.Machine.Retry = time.Second
			r.Cluster.Recheck = 5 * time.Second
			opts := func(wrap bool) func(string, *libvirt.Options) {
				return func(_ string, o *libvirt.Options) {
					if !cfg.StreamUploads {
						o.Upload = func(_ context.Context, _ string, r io.Reader, _ int64) error {
							_, err := io.Copy(io.Discard, r)
							return err
						}
					}
					if wrap && (cfg.CutAfter > 0 || cfg.CutBefore != 0) {
						o.WrapConn = cut.Wrap
					}
				}
			}
			// Only the machine reconciler's calls are counted, so each N
			// is one point of its sequence; the cluster's are checks.
			r.Machine.Hosts.Options, r.Cluster.Hosts.Options = opts(true), opts(false)
			r.Machine.Hosts.DialTimeout, r.Cluster.Hosts.DialTimeout = 20*time.Second, 20*time.Second
		},
	})
	fmt.Fprintf(os.Stderr, "%s%v\n", callsMark, cut.Procedures())
	if err != nil {
		fmt.Fprintln(os.Stderr, "provider:", err)
		return 1
	}
	return 0
}

// child is one provider process.
type child struct {
	cmd  *exec.Cmd
	out  *testbed.LogBuffer
	done chan struct{}
}

func startChild(t *testing.T, cfg childConfig) *child {
	t.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: exec.Command(self, "-test.run=^$"), out: &testbed.LogBuffer{}, done: make(chan struct{})}
	c.cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.cmd.Wait(); close(c.done) }()
	t.Cleanup(func() { c.stop(t) })
	return c
}

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop ends a running provider as its pod's kubelet would (SIGTERM).
func (c *child) stop(t *testing.T) {
	t.Helper()
	if c.exited() {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
		t.Errorf("the provider did not stop within 30s of SIGTERM; log:\n%s", tail(c.out.String(), 4<<10))
	}
}

// cutAt is the procedure the ended child was killed before by its
// Cutter; ok is false when it was not killed so (it was stopped, or
// ended on its own: the test fails then).
func (c *child) cutAt(t *testing.T) (proc uint32, ok bool) {
	t.Helper()
	out := c.out.String()
	i := strings.Index(out, cutMark)
	if i < 0 {
		if ws, isWS := c.cmd.ProcessState.Sys().(syscall.WaitStatus); isWS && ws.Exited() && ws.ExitStatus() == 0 {
			return 0, false // stopped by the test's SIGTERM
		}
		t.Fatalf("the provider ended, not killed by the test: %v\n%s", c.cmd.ProcessState, tail(out, 6<<10))
	}
	if ws, isWS := c.cmd.ProcessState.Sys().(syscall.WaitStatus); !isWS || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the provider cut off did not die of SIGKILL: %v\n%s", c.cmd.ProcessState, tail(out, 6<<10))
	}
	var calls int
	if _, err := fmt.Sscanf(out[i+len(cutMark):], "%d, before procedure %d", &calls, &proc); err != nil {
		t.Fatalf("the provider's cut line: %v\n%s", err, tail(out, 6<<10))
	}
	return proc, true
}

// calls are the procedures a child stopped by SIGTERM had called.
func (c *child) calls(t *testing.T) []uint32 {
	t.Helper()
	out := c.out.String()
	i := strings.Index(out, callsMark)
	if i < 0 {
		t.Fatalf("the provider did not report its calls:\n%s", tail(out, 6<<10))
	}
	line, _, _ := strings.Cut(out[i+len(callsMark):], "\n")
	var procs []uint32
	for _, f := range strings.Fields(strings.Trim(line, "[]")) {
		var p uint32
		if _, err := fmt.Sscan(f, &p); err != nil {
			t.Fatalf("the provider's calls %q: %v", line, err)
		}
		procs = append(procs, p)
	}
	return procs
}

// until waits for ok or for the child to end, whichever comes first; it
// reports whether ok came.
func until(t *testing.T, what string, within time.Duration, c *child, ok func() (bool, string)) bool {
	t.Helper()
	deadline := time.Now().Add(within)
	last := ""
	for time.Now().Before(deadline) {
		var done bool
		if done, last = ok(); done {
			return true
		}
		if c != nil && c.exited() {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
	if c != nil {
		t.Fatalf("%s: not within %s; last: %s\nprovider log:\n%s", what, within, last, tail(c.out.String(), 6<<10))
	}
	t.Fatalf("%s: not within %s; last: %s", what, within, last)
	return false
}

// whileUp is until for a provider that must keep running.
func whileUp(t *testing.T, what string, within time.Duration, c *child, ok func() (bool, string)) {
	t.Helper()
	if !until(t, what, within, c, ok) {
		t.Fatalf("%s: the provider ended: %v\n%s", what, c.cmd.ProcessState, tail(c.out.String(), 6<<10))
	}
}

// Procedures of libvirt's remote protocol (src/remote/remote_protocol.x,
// libvirt 9.0): the close that ends a connection, and those the sweep
// must have cut before: the disk, the define, the start.
const (
	procConnectClose         uint32 = 2
	procDomainCreate         uint32 = 9
	procStorageVolCreateXML  uint32 = 93
	procStorageVolDelete     uint32 = 94
	procDomainUndefineFlags  uint32 = 231
	procDomainDefineXMLFlags uint32 = 350
)

// lane is one namespace's cluster and pool in the sweep, on its own
// libvirtd (bd). A lane restarts the killed provider and lets it
// converge, then sweeps the delete too; a whileDown lane deletes the
// machine while the killed provider is down, then restarts it.
type lane struct {
	bd         *bed
	ns, pool   string
	md         *clusterv1.MachineDeployment
	kubeconfig string
	whileDown  bool
	// createKills[n-1] and deleteKills[n-1] are the procedures the
	// provider was killed before, cut off after n calls; createCalls and
	// deleteCalls are the calls of the first run not cut off.
	createKills, deleteKills []uint32
	createCalls, deleteCalls []uint32
}

// Kill the provider in place of each libvirt call of a machine's create,
// in turn, and start it again: every time it makes exactly one domain,
// with its volumes and address. Kill it in place of each call of the
// machine's delete, and start it again: no domain, volume, IPAddress or
// claim is left. And kill it mid-create, delete the machine while it is
// down, and start it again: nothing is left either.
func TestProviderKilledBetweenLibvirtCalls(t *testing.T) {
	bd, kubeconfig := setupBed(t)
	var ls []*lane
	for k, whileDown := range []bool{false, true} {
		// Each lane has a libvirtd of its own: on a shared one, how many
		// calls a machine takes would hang on the other lane's domains
		// (Capacity reads each), and a kill point could be skipped.
		lb := *bd
		lb.d = libvirttest.StartPrivate(t)
		lb.images = placeImage(t, lb.d)
		l := &lane{bd: &lb, ns: fmt.Sprintf("kill-%d", k), pool: fmt.Sprintf("kill%d", k), kubeconfig: kubeconfig, whileDown: whileDown}
		l.md = lb.newWorkload(t, l.ns, workloadSpec{pool: l.pool, addresses: []string{fmt.Sprintf("10.213.0.%d", 40+k)}, replicas: 0}).md
		// Before any Cluster has failure domains (ipamSees).
		lb.ipamSees(t, l.ns)
		ls = append(ls, l)
	}
	for _, l := range ls {
		name := "restarted"
		if l.whileDown {
			name = "deleted-while-down"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for n := 1; l.round(t, n); n++ {
			}
			t.Logf("a create takes %d libvirt calls: %v; killed after each of the first %d", len(l.createCalls), l.createCalls, len(l.createKills))
			if !l.whileDown {
				t.Logf("a delete takes %d libvirt calls: %v; killed after each of the first %d", len(l.deleteCalls), l.deleteCalls, len(l.deleteKills))
			}
		})
	}
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		// Every gap between two calls of an uncut run was cut: the kill
		// after n calls came before the uncut run's call n+1.
		covered := func(what string, kills, calls []uint32) {
			if len(calls) < 2 || len(kills) < len(calls)-1 {
				t.Errorf("%s: %d kills for %d calls %v; want one after each call but the last", what, len(kills), len(calls), calls)
				return
			}
			for i := range len(calls) - 1 {
				if kills[i] != calls[i+1] {
					t.Errorf("%s: killed after %d calls before procedure %d; the uncut run's call %d is %d", what, i+1, kills[i], i+2, calls[i+1])
				}
			}
		}
		restarted, down := ls[0], ls[1]
		covered("create", restarted.createKills, restarted.createCalls)
		covered("create, deleted while down", down.createKills, restarted.createCalls)
		covered("delete", restarted.deleteKills, restarted.deleteCalls)
		for _, want := range []uint32{procStorageVolCreateXML, procDomainDefineXMLFlags, procDomainCreate} {
			if !slices.Contains(restarted.createKills, want) {
				t.Errorf("no kill before procedure %d in a create", want)
			}
		}
		for _, want := range []uint32{procStorageVolDelete, procDomainUndefineFlags} {
			if !slices.Contains(restarted.deleteKills, want) {
				t.Errorf("no kill before procedure %d in a delete", want)
			}
		}
	})
}

// round n scales the lane to one machine under a provider cut off after
// n libvirt calls, then checks what the provider started again makes of
// it; false once the create took n calls or fewer (nothing to cut).
func (l *lane) round(t *testing.T, n int) bool {
	t.Helper()
	bd := l.bd
	bd.scale(t, l.md, 1)
	c := startChild(t, childConfig{Kubeconfig: l.kubeconfig, Namespace: l.ns, CutAfter: n})
	provisioned := func() (bool, string) {
		lms := bd.libvirtMachines(t, l.ns)
		if len(lms) != 1 {
			return false, fmt.Sprintf("%d LibvirtMachines", len(lms))
		}
		return ptr.Deref(lms[0].Status.Initialization.Provisioned, false), condition(lms[0].Status.Conditions, v1alpha1.ReadyCondition)
	}
	// The kill may come after the machine was provisioned (a reconcile
	// that followed), so the child's end says whether it was cut.
	until(t, fmt.Sprintf("n=%d: provisioned, or the provider killed", n), 90*time.Second, c, provisioned)
	c.stop(t)
	proc, cut := c.cutAt(t)
	if !cut {
		// A reconcile that followed the create (its own status writes
		// are events) may have begun before the stop; the create is
		// the calls of its connection, up to that connection's close.
		l.createCalls = c.calls(t)
		if i := slices.Index(l.createCalls, procConnectClose); i >= 0 {
			l.createCalls = l.createCalls[:i+1]
		}
		bd.checkOne(t, l)
		if !l.whileDown {
			l.killedDelete(t, n)
		} else {
			l.delete(t, fmt.Sprintf("n=%d", n))
		}
		return false
	}
	l.createKills = append(l.createKills, proc)
	what := fmt.Sprintf("n=%d (killed before procedure %d)", n, proc)
	if l.whileDown {
		l.delete(t, what+", deleted while down")
		return true
	}
	again := startChild(t, childConfig{Kubeconfig: l.kubeconfig, Namespace: l.ns})
	whileUp(t, what+": provisioned after the restart", 90*time.Second, again, provisioned)
	again.stop(t)
	bd.checkOne(t, l)
	t.Logf("%s, restarted: one domain", what)
	l.killedDelete(t, n)
	return true
}

// killedDelete deletes the lane's machine under a provider cut off after
// n calls, then lets it converge.
func (l *lane) killedDelete(t *testing.T, n int) {
	t.Helper()
	what := fmt.Sprintf("n=%d, delete", n)
	l.markDeleted(t)
	c := startChild(t, childConfig{Kubeconfig: l.kubeconfig, Namespace: l.ns, CutAfter: n})
	until(t, what+": the machine gone, or the provider killed", 90*time.Second, c, l.bd.goneFunc(t, l))
	c.stop(t)
	proc, cut := c.cutAt(t)
	if !cut {
		if l.deleteCalls == nil {
			l.deleteCalls = c.calls(t)
		}
		l.bd.checkNothingLeft(t, l, what)
		return
	}
	l.deleteKills = append(l.deleteKills, proc)
	l.delete(t, fmt.Sprintf("%s (killed before procedure %d)", what, proc))
}

// markDeleted scales the lane to zero and waits until Cluster API marks
// the LibvirtMachine for deletion (its Machine waits on its finalizer),
// so that the provider started next begins with the deletion; or until
// it is gone (a provider killed after it dropped the finalizer).
func (l *lane) markDeleted(t *testing.T) {
	t.Helper()
	l.bd.scale(t, l.md, 0)
	eventually(t, "the LibvirtMachine marked for deletion", 60*time.Second, func() (bool, string) {
		lms := l.bd.libvirtMachines(t, l.ns)
		return len(lms) == 0 || len(lms) == 1 && !lms[0].DeletionTimestamp.IsZero(), fmt.Sprint(len(lms), " LibvirtMachines")
	})
}

// delete deletes the lane's machine (unless already marked) and starts
// an uncut provider to remove it; nothing of it may be left.
func (l *lane) delete(t *testing.T, what string) {
	t.Helper()
	l.markDeleted(t)
	again := startChild(t, childConfig{Kubeconfig: l.kubeconfig, Namespace: l.ns})
	whileUp(t, what+": the machine gone after the restart", 90*time.Second, again, l.bd.goneFunc(t, l))
	again.stop(t)
	l.bd.checkNothingLeft(t, l, what)
	t.Logf("%s, restarted: nothing left", what)
}

// checkOne: one provisioned machine of the lane, one running domain of
// its name and UUID, exactly its three volumes, one IPAddress.
func (bd *bed) checkOne(t *testing.T, l *lane) {
	t.Helper()
	lms := bd.libvirtMachines(t, l.ns)
	if len(lms) != 1 {
		t.Fatalf("%d LibvirtMachines, want 1", len(lms))
	}
	lm := lms[0]
	doms := bd.domains(t, l.ns)
	if len(doms) != 1 || doms[0].Name != lm.Name || doms[0].UUID != string(lm.UID) || !doms[0].Running {
		t.Fatalf("domains %+v; want one running domain %s of UUID %s", doms, lm.Name, lm.UID)
	}
	if want := v1alpha1.ProviderID("host-a", string(lm.UID)); lm.Spec.ProviderID != want {
		t.Errorf("providerID %q, want %q", lm.Spec.ProviderID, want)
	}
	want := []string{lm.Name + "-disk0.qcow2", lm.Name + "-disk1.qcow2", lm.Name + "-seed.iso"}
	if got := bd.laneVolumes(t, l); !slices.Equal(got, want) {
		t.Fatalf("volumes of pool %s: %v; want exactly %v", l.pool, got, want)
	}
	var ips ipamv1.IPAddressList
	if err := bd.c.List(t.Context(), &ips, client.InNamespace(l.ns)); err != nil || len(ips.Items) != 1 {
		t.Errorf("IPAddresses: %d (%v); want 1", len(ips.Items), err)
	}
}

func (bd *bed) laneVolumes(t *testing.T, l *lane) []string {
	t.Helper()
	var out []string
	for _, v := range bd.volumes(t) {
		if strings.HasPrefix(v, l.pool+"-") {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

func (bd *bed) goneFunc(t *testing.T, l *lane) func() (bool, string) {
	return func() (bool, string) {
		var ms clusterv1.MachineList
		if err := bd.c.List(t.Context(), &ms, client.InNamespace(l.ns)); err != nil {
			return false, err.Error()
		}
		lms := bd.libvirtMachines(t, l.ns)
		var states []string
		for _, lm := range lms {
			states = append(states, lm.Name+": "+condition(lm.Status.Conditions, v1alpha1.ReadyCondition))
		}
		return len(ms.Items) == 0 && len(lms) == 0, fmt.Sprintf("%d Machines, %d LibvirtMachines %v", len(ms.Items), len(lms), states)
	}
}

// checkNothingLeft: no domain, volume, IPAddress or claim of the lane.
func (bd *bed) checkNothingLeft(t *testing.T, l *lane, what string) {
	t.Helper()
	if doms := bd.domains(t, l.ns); len(doms) != 0 {
		t.Fatalf("%s: domains left: %+v", what, doms)
	}
	if vols := bd.laneVolumes(t, l); len(vols) != 0 {
		t.Fatalf("%s: volumes left: %v", what, vols)
	}
	var ips ipamv1.IPAddressList
	if err := bd.c.List(t.Context(), &ips, client.InNamespace(l.ns)); err != nil || len(ips.Items) != 0 {
		t.Fatalf("%s: IPAddresses left: %d (%v)", what, len(ips.Items), err)
	}
	var claims ipamv1.IPAddressClaimList
	if err := bd.c.List(t.Context(), &claims, client.InNamespace(l.ns)); err != nil || len(claims.Items) != 0 {
		t.Fatalf("%s: IPAddressClaims left: %d (%v)", what, len(claims.Items), err)
	}
}
