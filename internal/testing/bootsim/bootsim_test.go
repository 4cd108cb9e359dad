package bootsim_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	pve "github.com/luthermonson/go-proxmox"

	"github.com/labctl/labctl/internal/testing/bootsim"
	"github.com/labctl/labctl/internal/testing/pvetest"
)

const uuid = "8f2b7c1e-4d5a-4e6f-9a0b-1c2d3e4f5a6b"

// metaData is CAPMOX's meta-data for a machine (pkg/cloudinit/
// metadata.go, v0.9.0, provider-id injection off as labctl renders it).
func metaData(instanceID, hostname string) string {
	return fmt.Sprintf("instance-id: %s\nlocal-hostname: %s\nhostname: %s\nkubernetes-version: v1.35.4\n", instanceID, hostname, hostname)
}

const networkConfig = `network:
  version: 2
  renderer: networkd
  ethernets:
    eth0:
      match:
        macaddress: BC:24:11:AA:BB:CC
      dhcp4: false
      dhcp6: false
      addresses:
        - '127.77.0.41/24'
      routes:
        - to: 0.0.0.0/0
          via: 127.77.0.1
`

// joinUserData is the shape of Cluster API v1.12.10's node cloud-init
// (bootstrap/kubeadm/internal/cloudinit/node.go) for labctl's
// KubeadmConfigTemplate: header, write_files with the join config,
// runcmd with kubeadm join. header and providerID vary per test.
func joinUserData(header, providerID string) string {
	return header + `#cloud-config
write_files:
-   path: /etc/kubernetes/pki/ca.crt
    owner: root:root
    permissions: '0640'
    content: |
      not used by a join
-   path: /run/kubeadm/kubeadm-join-config.yaml
    owner: root:root
    permissions: '0640'
    content: |
      ---
      apiVersion: kubeadm.k8s.io/v1beta4
      discovery:
        bootstrapToken:
          apiServerEndpoint: 127.77.0.30:6443
          caCertHashes:
          - sha256:0123
          token: abcdef.0123456789abcdef
      kind: JoinConfiguration
      nodeRegistration:
        kubeletExtraArgs:
        - name: provider-id
          value: ` + providerID + `
        - name: node-labels
          value: labctl.dev/pool=workers
        taints: []
-   path: /run/cluster-api/placeholder
    owner: root:root
    permissions: '0640'
    content: "This placeholder file is used to create the /run/cluster-api sub directory"
runcmd:
  - kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml  && echo success > /run/cluster-api/bootstrap-success.complete
users:
  - name: ubuntu
`
}

const jinja = "## template: jinja\n"

// labctl's rendered provider-id (internal/clusterapi, as CAPMOX's
// templates write it): single quotes inside the value.
const labctlProviderID = `proxmox://'{{ ds.meta_data.instance_id }}'`

// The real ISO writer (go-proxmox's CloudInit, the code CAPMOX calls)
// uploads the seed into the fake PVE; the sim's reader gets user-data,
// meta-data and network-config back, and the join bootstrap gives the
// Node the kubelet would register: name from local-hostname, providerID
// rendered from meta-data and unquoted as systemd does, labels from
// node-labels, no taints (taints: []).
func TestSeedThroughTheRealISOWriter(t *testing.T) {
	fake := pvetest.New(t)
	iso := cloudInit(t, fake, 300, joinUserData(jinja, labctlProviderID), metaData(uuid, "lab1-workers-x7k2p-abcde"), networkConfig)
	seed, err := bootsim.ReadSeed(iso)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(seed.MetaData), "instance-id: "+uuid) || !strings.Contains(string(seed.NetworkConfig), "127.77.0.41/24") {
		t.Fatalf("seed read back wrong: meta-data %q network-config %q", seed.MetaData, seed.NetworkConfig)
	}
	b, err := bootsim.ParseBootstrap(seed)
	if err != nil {
		t.Fatal(err)
	}
	if b.Action != bootsim.Join || b.APIServerEndpoint != "127.77.0.30:6443" || b.Token != "abcdef.0123456789abcdef" {
		t.Errorf("bootstrap = %s to %s with token %q, want a join to 127.77.0.30:6443", b.Action, b.APIServerEndpoint, b.Token)
	}
	n := b.Node
	if n.Name != "lab1-workers-x7k2p-abcde" || n.ProviderID != "proxmox://"+uuid {
		t.Errorf("Node %q providerID %q, want the hostname and proxmox://%s", n.Name, n.ProviderID, uuid)
	}
	if n.Labels["labctl.dev/pool"] != "workers" || n.Labels["kubernetes.io/hostname"] != n.Name || len(n.Taints) != 0 || n.ControlPlane {
		t.Errorf("Node labels %v taints %v control plane %v, want the pool label, the hostname label, no taints", n.Labels, n.Taints, n.ControlPlane)
	}
	ip, err := bootsim.NodeAddress(seed.NetworkConfig, "bc:24:11:aa:bb:cc")
	if err != nil || ip.String() != "127.77.0.41" {
		t.Errorf("node address %v, %v; want 127.77.0.41", ip, err)
	}
}

// kubeadm init's bootstrap: the control-plane Node gets kubeadm's labels
// and, with taints unset, its default control-plane taint.
func TestParseInit(t *testing.T) {
	ud := jinja + `#cloud-config
write_files:
-   path: /run/kubeadm/kubeadm.yaml
    owner: root:root
    permissions: '0640'
    content: |
      ---
      apiServer: {}
      apiVersion: kubeadm.k8s.io/v1beta4
      clusterName: lab1
      controlPlaneEndpoint: 127.77.0.30:6443
      kind: ClusterConfiguration
      kubernetesVersion: v1.35.4
      networking:
        podSubnet: 10.244.0.0/16
        serviceSubnet: 10.96.0.0/12
      ---
      apiVersion: kubeadm.k8s.io/v1beta4
      kind: InitConfiguration
      nodeRegistration:
        kubeletExtraArgs:
        - name: provider-id
          value: proxmox://'{{ ds.meta_data.instance_id }}'
runcmd:
  - 'kubeadm init --config /run/kubeadm/kubeadm.yaml  && echo success > /run/cluster-api/bootstrap-success.complete'
`
	b, err := bootsim.ParseBootstrap(&bootsim.Seed{UserData: []byte(ud), MetaData: []byte(metaData(uuid, "Lab1-Control-Plane-abc"))})
	if err != nil {
		t.Fatal(err)
	}
	if b.Action != bootsim.Init || b.Cluster.ControlPlaneEndpoint != "127.77.0.30:6443" || b.Cluster.Networking.PodSubnet != "10.244.0.0/16" {
		t.Fatalf("bootstrap %+v, want kubeadm init of lab1 at 127.77.0.30:6443", b)
	}
	if !strings.HasPrefix(b.Cluster.Raw, "apiServer: {}\napiVersion: kubeadm.k8s.io/v1beta4") {
		t.Errorf("ClusterConfiguration document for kubeadm-config = %q", b.Cluster.Raw)
	}
	n := b.Node
	if n.Name != "lab1-control-plane-abc" {
		t.Errorf("Node name %q, want the hostname lower-cased as kubeadm does", n.Name)
	}
	if _, ok := n.Labels[bootsim.LabelControlPlane]; !ok || len(n.Taints) != 1 || n.Taints[0].Key != bootsim.LabelControlPlane || n.Taints[0].Effect != "NoSchedule" {
		t.Errorf("control-plane Node labels %v taints %v, want kubeadm's control-plane label and NoSchedule taint", n.Labels, n.Taints)
	}
}

// A providerID that does not resolve is refused with why: no Jinja
// header (the braces stay), a variable meta-data lacks
// (CI_MISSING_JINJA_VAR/...), no provider-id at all.
func TestUnresolvedProviderID(t *testing.T) {
	for _, c := range []struct {
		name, userData, metaData, want string
	}{
		{"no jinja header", joinUserData("", labctlProviderID), metaData(uuid, "w1"), "header"},
		{"no instance-id in meta-data", joinUserData(jinja, labctlProviderID), "local-hostname: w1\n", "CI_MISSING_JINJA_VAR/instance_id"},
		{"an unknown variable", joinUserData(jinja, "proxmox://{{ ds.meta_data.uuid }}"), metaData(uuid, "w1"), "CI_MISSING_JINJA_VAR/uuid"},
		{"an empty id", joinUserData(jinja, "proxmox://''"), metaData(uuid, "w1"), "no <scheme>://<id>"},
		{"no provider-id", strings.Replace(joinUserData(jinja, labctlProviderID), "name: provider-id", "name: v", 1), metaData(uuid, "w1"), "no provider-id"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := bootsim.ParseBootstrap(&bootsim.Seed{UserData: []byte(c.userData), MetaData: []byte(c.metaData)})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one naming %q", err, c.want)
			}
		})
	}
}

// What is not a NoCloud seed is refused: bytes that are no ISO.
func TestReadSeedRefusesNonISO(t *testing.T) {
	if _, err := bootsim.ReadSeed([]byte(strings.Repeat("x", 64<<10))); err == nil {
		t.Fatal("ReadSeed took bytes that are no ISO 9660 volume")
	}
}

// A VM whose bootstrap's providerID does not resolve stays unbooted: the
// sim reports why (the test would fail) and starts nothing.
func TestUnbootableVMFailsTheTest(t *testing.T) {
	fake := pvetest.New(t)
	failed := make(chan string, 4)
	sim := bootsim.Start(t, fake, bootsim.WithFailureHandler(func(msg string) { failed <- msg }))
	cloudInit(t, fake, 300, joinUserData("", labctlProviderID), metaData(uuid, "w1"), networkConfig)
	start(t, fake, 300)
	select {
	case msg := <-failed:
		if !strings.Contains(msg, "VM 300 stays unbooted") || !strings.Contains(msg, "provider-id") {
			t.Errorf("failure %q does not name the VM and its provider-id", msg)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the sim reported nothing for an unbootable VM in 30 s")
	}
	// CAPMOX's `cloud-init status` through the guest agent sees the
	// failure (and would mark the machine's provisioning failed).
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	vm := vmOf(ctx, t, fake, 300)
	if err := vm.WaitForAgent(ctx, 5); err != nil {
		t.Fatal(err)
	}
	pid, err := vm.AgentExec(ctx, []string{"cloud-init", "status"}, "")
	if err != nil {
		t.Fatal(err)
	}
	st, err := vm.WaitForAgentExecExit(ctx, pid, 5)
	if err != nil {
		t.Fatal(err)
	}
	if st.ExitCode != 1 || st.OutData != "status: error\n" {
		t.Errorf("cloud-init status of the unbooted VM: exit %d %q, want 1 \"status: error\"", st.ExitCode, st.OutData)
	}
	if got := sim.Failures(); len(got) != 1 {
		t.Errorf("failures %v, want one", got)
	}
	if sim.Kubeconfig("127.77.0.30:6443") != "" {
		t.Error("a control plane runs for a VM that never booted")
	}
}

// cloudInit makes VM vmid in the fake and attaches a seed with the code
// CAPMOX calls (go-proxmox's VirtualMachine.CloudInit), returning the
// uploaded ISO's bytes.
func cloudInit(t *testing.T, fake *pvetest.Server, vmid int, userData, metaData, network string) []byte {
	t.Helper()
	// As image-builder's templates: the guest agent on. (Set before the
	// server knows of any request for this VM.)
	fake.AddVM("pv1-1", vmid, "m", 2048, false, false, "labctl", "kubernetes-v1.35.4").Config["agent"] = "1"
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	vm := vmOf(ctx, t, fake, vmid)
	if err := vm.CloudInit(ctx, "ide0", userData, metaData, "", network); err != nil {
		t.Fatalf("go-proxmox CloudInit: %v", err)
	}
	iso, ok := fake.Volume("pv1-1", "local", fmt.Sprintf("local:iso/user-data-%d.iso", vmid))
	if !ok {
		t.Fatalf("no ISO uploaded; volumes %v", fake.Volumes("pv1-1", "local"))
	}
	return iso
}

func start(t *testing.T, fake *pvetest.Server, vmid int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	task, err := vmOf(ctx, t, fake, vmid).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.WaitFor(ctx, 10); err != nil {
		t.Fatal(err)
	}
}

func vmOf(ctx context.Context, t *testing.T, fake *pvetest.Server, vmid int) *pve.VirtualMachine {
	t.Helper()
	c := pve.NewClient(fake.URL+"/api2/json", pve.WithHTTPClient(fake.Client()), pve.WithAPIToken(fake.TokenID, fake.Secret))
	n, err := c.Node(ctx, "pv1-1")
	if err != nil {
		t.Fatal(err)
	}
	vm, err := n.VirtualMachine(ctx, vmid)
	if err != nil {
		t.Fatal(err)
	}
	return vm
}
