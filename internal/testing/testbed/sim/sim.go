// Package sim is the management cluster in a box for a person at a
// terminal (`make sim`, issue 11): the box (etcd, kube-apiserver,
// kube-controller-manager, the runner and the cert-manager stand-in; no
// provider manager until labctl installs one; Kamaji and its datastore
// once it does, for the lab's tenant1) and the strict fake PVE on
// loopback with a test CA, whose VMs the VM-boot sim boots (its guest
// agent answers, cloud-init and kubeadm run as bootsim plays them), plus
// the files labctl needs against them: a
// kubeconfig, a lab.yaml and the offline folder of the real charts and
// provider releases. Everything lives in the test's temporary folders and
// goes when the test ends.
//
//	s := sim.Start(t)
//	fmt.Fprint(os.Stderr, s.Instructions())
package sim

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/bootsim"
	"github.com/labctl/labctl/internal/testing/pvetest"
	"github.com/labctl/labctl/internal/testing/sshtest"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/box"
	"github.com/labctl/labctl/internal/testing/testbed/pki"
	"github.com/labctl/labctl/internal/testing/testbed/standin"
)

// The sim's lab is examples/lab.yaml moved onto loopback, as the box's
// CAPMOX test moves it: PVE 192.168.0.8 becomes PVEAddr, the VM network
// 192.168.4.0/24 becomes 127.77.0.0/24 (VIP 127.77.0.30, nodes
// 127.77.0.40-59). The fake PVE listens on one of them, and the VM-boot
// sim's workload control plane on the VIP.
const (
	PVEAddr = "127.77.0.8"
	// VIP is lab1's control-plane endpoint on loopback.
	VIP = "127.77.0.30"
	// LabName replaces the example's "home", so what labctl stores for
	// the sim (under ~/.config/labctl/<lab>) never mixes with the
	// person's own lab.
	LabName = "sim"
	// TemplateID is the image-builder template the fake PVE holds.
	TemplateID = 9000
	// SecretEnv is the variable the example's tokenSecret names.
	SecretEnv = "PVE_TOKEN_SECRET"
	// Tenant is examples/lab-tenants.yaml's tenant1, added to the sim's
	// lab: a Kamaji control plane, workers on pv1-1 from zero.
	Tenant = "tenant1"
	// TenantPort is tenant1's controlPlane.port in the example: its API
	// server on the management VM's address, through ServiceLB.
	TenantPort = 6445
)

// Sim is a running box with the fake PVE and the files for labctl.
type Sim struct {
	Box *box.Box
	PVE *pvetest.Server
	// Boot boots the fake PVE's VMs: a workload control plane on the
	// VIP, workers that join it.
	Boot *bootsim.Sim
	// Kubeconfig is the box's admin kubeconfig (0600).
	Kubeconfig string
	// Lab is lab.yaml (0600); it names the secret's variable, never the
	// secret.
	Lab string
	// SecretFile holds the fake PVE's token secret (0600), for the
	// export line of Instructions.
	SecretFile string
	// CAFile is the test CA the fake PVE's certificate is signed by, the
	// lab's tls.caFile.
	CAFile string
	// OfflineDir is the folder for 'mgmt install --offline-dir': the real
	// charts and providers' release files (standin.UpstreamOffline).
	OfflineDir string
	// SSHKeyFile is the lab's management.sshPublicKeyFile: a key made for
	// the sim.
	SSHKeyFile string
	// Kubectl is the test bed's kubectl, which may not be on PATH.
	Kubectl string
	// TenantEndpoint is tenant1's API server, host:port.
	TenantEndpoint string
}

// Start runs the sim until the test ends. It skips where a part of the
// test bed is missing, as the box's other tests do.
func Start(t testing.TB) *Sim {
	t.Helper()
	// Every manager labctl's Provider CRs bring up; the runner needs them
	// once 'mgmt install' has run.
	box.Require(t, "cluster-api-operator", "cluster-api", "kubeadm-bootstrap", "kubeadm-control-plane", "capmox", "ipam-in-cluster",
		"cluster-autoscaler", "kwok", "kamaji", "kamaji-provider", "kube-controller-manager", "kube-scheduler")
	dir := t.TempDir()
	s := &Sim{
		Lab:        filepath.Join(dir, "lab.yaml"),
		SecretFile: filepath.Join(dir, "pve-token-secret"),
		CAFile:     filepath.Join(dir, "pve-root-ca.pem"),
	}

	ca, err := pki.NewCA("labctl sim PVE CA")
	if err != nil {
		t.Fatalf("sim: %v", err)
	}
	pair, err := ca.Serving([]string{"localhost"}, []net.IP{net.ParseIP(PVEAddr)})
	if err != nil {
		t.Fatalf("sim: %v", err)
	}
	cert, err := tls.X509KeyPair(pair.Cert, pair.Key)
	if err != nil {
		t.Fatalf("sim: %v", err)
	}
	// The guest agent of image-builder's template answers once a VM
	// runs; bootsim answers its cloud-init status.
	s.PVE = pvetest.New(t, pvetest.WithAddr(PVEAddr+":0"), pvetest.WithCertificate(cert))
	if err := os.WriteFile(s.CAFile, ca.PEM, 0o600); err != nil {
		t.Fatalf("sim: writing the PVE CA: %v", err)
	}
	if err := os.WriteFile(s.SecretFile, []byte(s.PVE.Secret+"\n"), 0o600); err != nil {
		t.Fatalf("sim: writing the token secret: %v", err)
	}
	root, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatalf("sim: %v", err)
	}
	example, err := os.ReadFile(filepath.Join(root, "examples", "lab.yaml"))
	if err != nil {
		t.Fatalf("sim: %v", err)
	}
	// tenant1 as the owner's tenant example has it.
	example = []byte(strings.Replace(string(example), "\nscaleTest:\n", "\n"+testbed.ExampleTenant(t, Tenant, TenantPort)+"scaleTest:\n", 1))
	// The person's own key may not exist (cluster create needs one); no
	// VM boots in the sim, so a key of its own serves.
	s.SSHKeyFile, _ = sshtest.UserKey(t)
	data, err := LoopbackLab(example, s.PVE.URL, s.CAFile, s.SSHKeyFile)
	if err != nil {
		t.Fatalf("sim: %v", err)
	}
	if err := os.WriteFile(s.Lab, data, 0o600); err != nil {
		t.Fatalf("sim: writing lab.yaml: %v", err)
	}
	// The lab must load as labctl loads it, or the person gets a sim
	// whose first command fails.
	t.Setenv(SecretEnv, s.PVE.Secret)
	lab, _, err := config.Load(context.Background(), config.Request{Path: s.Lab, Explicit: true})
	if err != nil {
		t.Fatalf("sim: the loopback lab does not load: %v", err)
	}

	// What the owner's pv1-1 holds when 'cluster create' runs: the
	// template image-builder left, with the tags labctl's
	// templateSelector matches, and the management VM and another VM at
	// the start of the vmidRange.
	img := lab.Images[0]
	s.PVE.AddTemplate("pv1-1", TemplateID, img.Name, img.TemplateTags()...)
	s.PVE.AddVM("pv1-1", lab.Management.VMID, lab.Management.Name, 8192, true, false)
	s.PVE.AddVM("pv1-1", 200, "owner-vm", 1024, false, false)

	var mgmt atomic.Pointer[kube.Client]
	s.Boot = bootsim.Start(t, s.PVE, bootsim.WithFailureHandler(func(msg string) {
		// A person is watching: say it there, and let the test fail at
		// the end as a box test would.
		fmt.Fprintln(os.Stderr, msg)
		t.Errorf("%s", msg)
	}), bootsim.WithHostedControlPlanes(box.TenantKubeconfigs(mgmt.Load)))
	s.Box = box.Start(t, box.Bare())
	mgmt.Store(kube.NewForConfig(s.Box.Env.Config, s.Box.Env.Kubeconfig))
	// k3s's ServiceLB on the management VM: tenant1's API server on
	// its address.
	s.Box.Runner.ServeLoadBalancers(lab.Management.IP)
	s.Kubeconfig = s.Box.Env.Kubeconfig
	s.Kubectl = filepath.Join(testbed.Assets(t), "kubectl")
	s.OfflineDir = standin.UpstreamOffline(t)
	s.TenantEndpoint = net.JoinHostPort(lab.Management.IP, strconv.Itoa(TenantPort))
	return s
}

// LoopbackLab is examples/lab.yaml (example) with its addresses moved onto
// loopback, the fake PVE's URL and CA, sshKeyFile as the management
// VM's key, and the lab named LabName. It
// fails when the example no longer holds what it replaces, or still names
// a LAN address outside a comment.
func LoopbackLab(example []byte, pveURL, caFile, sshKeyFile string) ([]byte, error) {
	s := string(example)
	for _, r := range [][2]string{
		{"https://192.168.0.8:8006", pveURL},
		{"~/.config/labctl/pve-root-ca.pem", caFile},
		{"~/.ssh/id_ed25519.pub", sshKeyFile},
		{"192.168.4.", "127.77.0."},
		{"\n  name: home\n", "\n  name: " + LabName + "\n"},
	} {
		if !strings.Contains(s, r[0]) {
			return nil, fmt.Errorf("examples/lab.yaml no longer holds %q; update sim.LoopbackLab", r[0])
		}
		s = strings.ReplaceAll(s, r[0], r[1])
	}
	for i, line := range strings.Split(s, "\n") {
		if value, _, _ := strings.Cut(line, "#"); strings.Contains(value, "192.168.") {
			return nil, fmt.Errorf("the sim's lab still names a LAN address on line %d: %s", i+1, line)
		}
	}
	return []byte(s), nil
}

// Instructions tell a person how to use labctl against the sim: the
// paths, an export line that reads the token secret from its file (so the
// secret itself never reaches the terminal or a log), and the commands.
func (s *Sim) Instructions() string {
	var b strings.Builder
	fmt.Fprintf(&b, `
== labctl sim: a management cluster in a box, and a fake Proxmox VE at %s ==
kubeconfig: %s
lab.yaml:   %s

In another shell:
  export %s="$(cat %s)"
  export KUBECONFIG=%s LAB=%s
  labctl -c "$LAB" config validate
  labctl -c "$LAB" mgmt install --kubeconfig "$KUBECONFIG" --offline-dir %s
  labctl -c "$LAB" mgmt status --kubeconfig "$KUBECONFIG"
  labctl -c "$LAB" cluster create lab1 --kubeconfig "$KUBECONFIG"
  labctl -c "$LAB" cluster create %[10]s --kubeconfig "$KUBECONFIG"
  %[9]s get clusters,machines,proxmoxmachines,tenantcontrolplanes -A
  labctl -c "$LAB" scale-test lab1 --kubeconfig "$KUBECONFIG"
  labctl -c "$LAB" scale-test %[10]s --kubeconfig "$KUBECONFIG"
  labctl -c "$LAB" cluster delete lab1 --kubeconfig "$KUBECONFIG" --yes
  labctl -c "$LAB" cluster delete %[10]s --kubeconfig "$KUBECONFIG" --yes

The fake PVE's VMs boot as the VM-boot sim plays them: lab1's control
plane serves on its VIP %[11]s, and its workers join it. %[10]s's control
plane is Kamaji's, run in the box; it serves on %[12]s, and its workers
join it there.

Ctrl-C here stops everything and removes these files.
`, s.PVE.URL, s.Kubeconfig, s.Lab, SecretEnv, s.SecretFile, s.Kubeconfig, s.Lab, s.OfflineDir, s.Kubectl, Tenant, VIP, s.TenantEndpoint)
	return b.String()
}
