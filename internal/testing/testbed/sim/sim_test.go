package sim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/hypervisor/proxmox"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/mgmt"
	"github.com/labctl/labctl/internal/sshkey"
	"github.com/labctl/labctl/internal/testing/testbed/sim"
	"github.com/labctl/labctl/internal/ui"
)

// EnvSim turns TestSim on; 'make sim' sets it.
const EnvSim = "LABCTL_SIM"

// TestSim is 'make sim': it starts the sim, prints how to reach it, and
// blocks until SIGINT or SIGTERM, then lets the test's cleanups stop
// everything. The signals are caught from its first line: their default
// would end the test binary at once, skipping the cleanups, and envtest
// starts etcd and kube-apiserver in process groups of their own (Setpgid,
// controller-runtime's pkg/internal/testing/process), where a terminal's
// Ctrl-C does not reach them; they would be left running.
func TestSim(t *testing.T) {
	if os.Getenv(EnvSim) != "1" {
		t.Skipf("the sim runs for 'make sim' only (%s=1)", EnvSim)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	// The first cleanup runs last: signals stay caught until every
	// process is stopped, so a second Ctrl-C cannot cut the stopping short.
	t.Cleanup(func() { signal.Stop(sigs) })
	got := make(chan os.Signal, 1)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "\nsim: %v: stopping everything\n", s)
		got <- s
	}()
	// A person asked for the sim: a missing part is a failure, not a
	// quiet skip (the skip's message above says what is missing).
	defer func() {
		if t.Skipped() {
			t.Errorf("the sim cannot start; see the message above")
		}
	}()

	s := sim.Start(t)
	select {
	case <-got:
		return // a Ctrl-C while starting
	default:
	}
	fmt.Fprint(os.Stderr, s.Instructions())
	<-got
}

// What the sim prints works: the export line a person copies gives the
// token secret without the secret ever being printed, the lab.yaml loads
// as labctl loads it (and holds no secret), labctl's Proxmox client
// reaches the fake PVE over TLS verified with the lab's caFile, and
// labctl's 'mgmt status' reads the box through the printed kubeconfig.
func TestSimOutput(t *testing.T) {
	s := sim.Start(t)
	out := s.Instructions()
	for what, p := range map[string]string{"kubeconfig": s.Kubeconfig, "lab.yaml": s.Lab, "offline folder": s.OfflineDir, "secret file": s.SecretFile} {
		if !strings.Contains(out, p) {
			t.Errorf("the sim's instructions do not name the %s %s:\n%s", what, p, out)
		}
	}
	if strings.Contains(out, s.PVE.Secret) {
		t.Fatalf("the sim printed the token secret:\n%s", out)
	}
	data, err := os.ReadFile(s.Lab)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte(s.PVE.Secret)) {
		t.Errorf("lab.yaml holds the token secret:\n%s", data)
	}
	for _, f := range []string{s.Lab, s.SecretFile, s.Kubeconfig} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: want mode 0600, got %v (%v)", f, fi.Mode().Perm(), err)
		}
	}

	// The export line, run by a shell as pasted.
	var export string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "export "+sim.SecretEnv+"=") {
			export = strings.TrimSpace(line)
		}
	}
	if export == "" {
		t.Fatalf("the sim prints no export line for %s:\n%s", sim.SecretEnv, out)
	}
	secret, err := exec.Command("sh", "-c", export+`; printf %s "$`+sim.SecretEnv+`"`).Output()
	if err != nil || string(secret) != s.PVE.Secret {
		t.Fatalf("%q run by sh exports %s of %d bytes (%v), not the fake PVE's token secret", export, sim.SecretEnv, len(secret), err)
	}
	t.Setenv(sim.SecretEnv, string(secret))

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	lab, _, err := config.Load(ctx, config.Request{Path: s.Lab, Explicit: true})
	if err != nil {
		t.Fatalf("the sim's lab.yaml does not load: %v", err)
	}
	if lab.Metadata.Name != sim.LabName {
		t.Errorf("the sim's lab is named %q, want %q (kept apart from the person's own lab's state)", lab.Metadata.Name, sim.LabName)
	}
	// cluster create reads the management VM's key; the person may have
	// none of their own.
	if _, err := sshkey.Authorized(lab.Management.SSHPublicKeys, lab.Management.SSHPublicKeyFile); err != nil {
		t.Errorf("the sim's lab gives cluster create no SSH key: %v", err)
	}
	// The walk the instructions give, whose machines the VM-boot sim
	// boots: lab1 on the VIP they name, and the tenant on the management
	// VM's address, its control plane Kamaji's.
	for _, step := range []string{"mgmt install", "cluster create lab1", "scale-test lab1", "cluster delete lab1",
		"cluster create " + sim.Tenant, "scale-test " + sim.Tenant, "cluster delete " + sim.Tenant} {
		if !strings.Contains(out, `labctl -c "$LAB" `+step+" ") {
			t.Errorf("the sim's instructions lack 'labctl %s':\n%s", step, out)
		}
	}
	if c, err := lab.Cluster("lab1"); err != nil || c.ControlPlane.Endpoint != sim.VIP || !strings.Contains(out, sim.VIP) {
		t.Errorf("the sim's lab1 serves on %v (%v), and the instructions must name that VIP %s", c, err, sim.VIP)
	}
	tenant, err := lab.Cluster(sim.Tenant)
	if err != nil || !tenant.Kamaji() || tenant.ControlPlane.Port != sim.TenantPort {
		t.Errorf("the sim's lab has no Kamaji tenant %s on port %d: %+v (%v)", sim.Tenant, sim.TenantPort, tenant, err)
	} else if want := lab.Management.IP + ":" + strconv.Itoa(sim.TenantPort); s.TenantEndpoint != want || !strings.Contains(out, want) {
		t.Errorf("the instructions must name %s's endpoint %s (ServiceLB on the management VM's address), the sim has %q:\n%s", sim.Tenant, want, s.TenantEndpoint, out)
	}
	px := lab.Hypervisors[0].Proxmox
	if px == nil || px.URL != s.PVE.URL || px.TLS.CAFile != s.CAFile {
		t.Fatalf("the sim's lab does not aim at the fake PVE %s with CA %s: %+v", s.PVE.URL, s.CAFile, px)
	}
	po, err := drivers.ProxmoxOptions(&lab.Hypervisors[0])
	if err != nil {
		t.Fatal(err)
	}
	d, err := proxmox.New(po)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := d.Connect(ctx); err != nil || !strings.HasPrefix(v, "PVE ") {
		t.Errorf("labctl's Proxmox client against the sim's fake PVE: %q, %v", v, err)
	}

	kc, err := kube.Connect(s.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	io, _, so, se := ui.Test()
	_, err = mgmt.Status(ctx, mgmt.StatusOptions{IO: io, Lab: lab, Output: "json",
		Mgmt: func(context.Context) (*kube.Client, error) { return kc, nil }})
	// Nothing is installed yet: every component is reported, none ready.
	if !errors.Is(err, mgmt.ErrNotReady) {
		t.Fatalf("mgmt status on the fresh sim: %v, want %v\n%s%s", err, mgmt.ErrNotReady, so.String(), se.String())
	}
	var rep mgmt.Report
	if err := json.Unmarshal(so.Bytes(), &rep); err != nil {
		t.Fatalf("mgmt status -o json: %v\n%s", err, so.String())
	}
	if host := strings.TrimSuffix(s.Box.Env.Config.Host, "/"); rep.Server != host || len(rep.Components) == 0 {
		t.Errorf("mgmt status read %q with %d components, want the box's API server %s and every component", rep.Server, len(rep.Components), host)
	}
	for _, c := range rep.Components {
		if c.Ready {
			t.Errorf("component %s is ready on a sim where nothing was installed", c.Name)
		}
	}
}
