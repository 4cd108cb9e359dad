package controller_test

// The provider against the machine's real libvirtd (root; started by
// hack/libvirt-testbed/host-up.sh, shared with other runs through the
// real-VM lock): real VMs boot under QEMU (TCG here) from the test image
// (hack/libvirt-testbed/build-image.sh), on the test's NAT network
// labctl-test (10.213.0.0/24, fenced in), reached the way the provider
// reaches a host: qemu+ssh to the test's own sshd on 127.0.0.1, with the
// key and known_hosts from the host's credentials Secret.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"golang.org/x/crypto/ssh"

	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/libvirt"
	"github.com/labctl/labctl/internal/provider/libvirt/api/v1alpha1"
	"github.com/labctl/labctl/internal/testing/libvirttest"
	"github.com/labctl/labctl/internal/testing/sshtest"
	"github.com/labctl/labctl/internal/vmssh"
)

// realBoot bounds one TCG boot on 2 busy cores.
const realBoot = 10 * time.Minute

// realHost prepares the test pool and network on the machine's libvirtd,
// fences the network in and puts the test image in the pool; cleanup
// removes all of it and checks nothing of the test is left.
func realHost(t *testing.T, image, sum string) *libvirt.Driver {
	t.Helper()
	ctx := t.Context()
	d, err := libvirt.New(ctx, libvirt.Options{
		Name: "testbed", URI: "qemu:///system", Pool: libvirttest.RealPool, PoolPath: "/var/lib/libvirt/images/" + libvirttest.RealPool,
		Network: libvirttest.RealNetwork, Subnet: netip.MustParsePrefix(libvirttest.RealSubnet), Gateway: netip.MustParseAddr(libvirttest.RealGateway),
		LocalOnlyDNS: true, DomainType: os.Getenv("LABCTL_TEST_DOMAIN_TYPE"),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(filepath.Dir(image))))
	spec := hypervisor.ImageSpec{URL: srv.URL + "/" + filepath.Base(image), Checksum: "sha256:" + sum}
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for _, err := range []error{d.RemoveImage(ctx, spec), d.RemoveNetwork(ctx), d.RemovePool(ctx)} {
			if err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
		if pool, network, err := d.HostState(ctx); err != nil || pool != "missing" || network != "missing" {
			t.Errorf("left behind: pool %s, network %s (%v)", pool, network, err)
		}
		_ = d.Close()
	})
	if err := d.PrepareHost(ctx); err != nil {
		t.Fatal(err)
	}
	bridge, err := d.NetworkBridge(ctx)
	if err != nil {
		t.Fatal(err)
	}
	libvirttest.Fence(t, bridge)
	began := time.Now()
	if _, err := d.EnsureImage(ctx, spec); err != nil {
		t.Fatal(err)
	}
	t.Logf("test image in pool %s in %s", libvirttest.RealPool, time.Since(began).Round(time.Millisecond))
	return d
}

// TestRealVMMachineDeployment: a Cluster and a MachineDeployment on a
// LibvirtMachineTemplate, with the real Cluster API core manager and
// in-cluster IPAM, and the provider as its own process. The Machine's VM
// boots for real; the test logs in over SSH (checking the host key its
// bootstrap data gave it) and reads the marker the bootstrap data wrote.
// Scaling to 2 boots a second. Deleting the Cluster leaves no domain, no
// volume and no IPAddress. With LABCTL_BENCH=1 (make bench-libvirt) it
// prints the BENCH figures: Machine created to domain running, and to
// sshd answering on the Machine's address.
func TestRealVMMachineDeployment(t *testing.T) {
	image, sum := libvirttest.RealImage(t)
	c, kubeconfig, _ := newBox(t)
	libvirttest.TakeVMTurn(t)
	drv := realHost(t, image, sum)
	bd := &bed{c: c, images: drv}
	ctx := t.Context()
	ns := "realvm"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}

	// The host, as a user writes it: qemu+ssh with the key and the host
	// key in its Secret.
	sshd := libvirttest.StartSSHD(t)
	key, err := os.ReadFile(sshd.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kvm1-ssh"},
		Type:       corev1.SecretTypeSSHAuth,
		Data: map[string][]byte{
			v1alpha1.KeySSHPrivateKey: key,
			v1alpha1.KeyKnownHosts:    []byte(sshd.KnownHostsLine(sshd.HostKey) + "\n"),
		},
	}); err != nil {
		t.Fatal(err)
	}
	host := v1alpha1.LibvirtHost{
		Name: "kvm1", URI: fmt.Sprintf("qemu+ssh://%s@127.0.0.1:%s/system", sshd.Login, sshd.Port),
		CredentialsRef: v1alpha1.SecretReference{Name: "kvm1-ssh"},
	}

	// The bootstrap data: a login with the user's key, the host key the
	// test knows, and the marker.
	t.Setenv("SSH_AUTH_SOCK", "")
	pubFile, pub := sshtest.UserKey(t)
	pubKey := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
	hostKey, err := vmssh.GenerateHostKey()
	if err != nil {
		t.Fatal(err)
	}
	token := fmt.Sprintf("machine-deployment-%d", time.Now().UnixNano())
	// Written as a bootstrap provider would, with no host name: the
	// provider's meta-data gives the machine's (local-hostname).
	hk := hostKey.CloudInit()
	doc, err := yaml.Marshal(map[string]any{
		"users": []any{map[string]any{
			"name": "tester", "sudo": "ALL=(ALL) NOPASSWD:ALL", "shell": "/bin/bash", "ssh_authorized_keys": []string{pubKey},
		}},
		"ssh_keys":    map[string]string{"ed25519_private": string(hk.Private), "ed25519_public": hk.Public},
		"write_files": []any{map[string]string{"path": "/var/lib/labctl-test/marker", "content": token, "permissions": "0600"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	userData := "#cloud-config\n" + string(doc)
	vol := filepath.Base(image)
	w := bd.newWorkload(t, ns, workloadSpec{
		// Named so that host-down.sh removes what a test killed by its
		// timeout leaves (labctl-test-*).
		pool:  "labctl-test",
		hosts: []v1alpha1.LibvirtHost{host}, network: libvirttest.RealNetwork,
		addresses: []string{"10.213.0.50-10.213.0.51"}, memoryMiB: 1024, diskGiB: 10,
		imagePool: libvirttest.RealPool, volume: vol, bootstrap: userData, replicas: 0,
	})

	bd.ipamSees(t, ns)
	provider := startChild(t, childConfig{Kubeconfig: kubeconfig, StreamUploads: true})
	bootCtx, stop := context.WithTimeout(ctx, 3*realBoot)
	defer stop()

	// Scale to 1 and time it: Machine created -> domain running -> sshd.
	scaled := time.Now()
	bd.scale(t, w.md, 1)
	var m clusterv1.Machine
	whileUp(t, "the Machine created", 60*time.Second, provider, func() (bool, string) {
		var ms clusterv1.MachineList
		if err := c.List(ctx, &ms, client.InNamespace(ns)); err != nil || len(ms.Items) == 0 {
			return false, fmt.Sprint(err)
		}
		m = ms.Items[0]
		return true, ""
	})
	created := time.Now()
	// On the way, when the address was bound and the domain defined.
	var bound, defined time.Time
	whileUp(t, "the address bound and the domain defined", realBoot, provider, func() (bool, string) {
		if bound.IsZero() {
			var ips ipamv1.IPAddressList
			if err := c.List(ctx, &ips, client.InNamespace(ns)); err == nil && len(ips.Items) > 0 {
				bound = time.Now()
			}
		}
		if defined.IsZero() && len(bd.domains(t, ns)) > 0 {
			defined = time.Now()
		}
		return !bound.IsZero() && !defined.IsZero(), fmt.Sprintf("bound %v, defined %v", !bound.IsZero(), !defined.IsZero())
	})
	lm := bd.provisioned(t, ns, 1, realBoot, provider)[0]
	running := time.Now()
	wantID := v1alpha1.ProviderID("kvm1", string(lm.UID))
	whileUp(t, "the Machine provisioned with providerID and address", 60*time.Second, provider, func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(&m), &m); err != nil {
			return false, err.Error()
		}
		return m.Spec.ProviderID == wantID && ptr.Deref(m.Status.Initialization.InfrastructureProvisioned, false) &&
				slices.ContainsFunc(m.Status.Addresses, func(a clusterv1.MachineAddress) bool { return a.Address == "10.213.0.50" }),
			fmt.Sprintf("providerID %q, addresses %v", m.Spec.ProviderID, m.Status.Addresses)
	})
	addr := netip.MustParseAddr("10.213.0.50")
	if _, err := libvirttest.SSHBanner(bootCtx, addr); err != nil {
		t.Fatal(err)
	}
	answered := time.Now()
	if doms := bd.domains(t, ns); len(doms) != 1 || doms[0].Name != lm.Name || doms[0].UUID != string(lm.UID) || !doms[0].Running {
		t.Fatalf("domains %+v; want one running domain %s of UUID %s", doms, lm.Name, lm.UID)
	}
	typ, err := drv.DomainType()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("BENCH provider (%s guest): MachineDeployment scaled -> Machine created %.1fs; Machine created -> domain running %.1fs, -> sshd on %s %.1fs",
		typ, created.Sub(scaled).Seconds(), running.Sub(created).Seconds(), addr, answered.Sub(created).Seconds())
	t.Logf("BENCH provider, on the way: Machine created -> IPAddress bound %.1fs, -> domain defined %.1fs, -> LibvirtMachine provisioned (domain running) %.1fs",
		bound.Sub(created).Seconds(), defined.Sub(created).Seconds(), running.Sub(created).Seconds())

	// The bootstrap data ran: read the root-only marker over SSH, with
	// the user's key, checking the host key it installed.
	auth, err := vmssh.UserAuth([]string{pubKey}, pubFile)
	if err != nil {
		t.Fatal(err)
	}
	target := vmssh.Target{Addr: netip.AddrPortFrom(addr, 22), User: "tester", HostKey: hostKey.PublicKey(), Auth: auth}
	got, err := libvirttest.ReadWhenUp(bootCtx, target, "/var/lib/labctl-test/marker")
	if err != nil || string(got) != token {
		t.Fatalf("reading the marker over SSH = %q, %v; want %q", got, err, token)
	}
	// The guest's name is the machine's: meta-data's local-hostname.
	if hn, err := vmssh.ReadFile(bootCtx, target, "/etc/hostname"); err != nil || strings.TrimSpace(string(hn)) != lm.Name {
		t.Errorf("the guest's /etc/hostname = %q, %v; want %s", hn, err, lm.Name)
	}

	// Scale to 2: a second VM, the pool's next address, booted.
	bd.scale(t, w.md, 2)
	lms := bd.provisioned(t, ns, 2, realBoot, provider)
	var second v1alpha1.LibvirtMachine
	for _, l := range lms {
		if l.Name != lm.Name {
			second = l
		}
	}
	if !slices.ContainsFunc(second.Status.Addresses, func(a clusterv1.MachineAddress) bool { return a.Address == "10.213.0.51" }) {
		t.Errorf("the second machine's addresses %v; want 10.213.0.51", second.Status.Addresses)
	}
	if _, err := libvirttest.SSHBanner(bootCtx, netip.MustParseAddr("10.213.0.51")); err != nil {
		t.Fatal(err)
	}
	if doms := bd.domains(t, ns); len(doms) != 2 || !doms[0].Running || !doms[1].Running {
		t.Fatalf("domains after scaling to 2: %+v", doms)
	}

	// Delete the Cluster: no domain, volume or IPAddress is left.
	if err := c.Delete(ctx, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: w.name}}); err != nil {
		t.Fatal(err)
	}
	whileUp(t, "the Cluster gone", realBoot, provider, func() (bool, string) {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: w.name}, &clusterv1.Cluster{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if doms := bd.domains(t, ns); len(doms) != 0 {
		t.Errorf("domains left after the Cluster's deletion: %+v", doms)
	}
	for _, v := range bd.volumes(t) {
		if v != vol && !strings.HasPrefix(v, vol+".sha256-") {
			t.Errorf("volume %s left after the Cluster's deletion (the pool holds only the image %s)", v, vol)
		}
	}
	var ips ipamv1.IPAddressList
	if err := c.List(ctx, &ips, client.InNamespace(ns)); err != nil || len(ips.Items) != 0 {
		t.Errorf("IPAddresses left: %d (%v)", len(ips.Items), err)
	}
}
