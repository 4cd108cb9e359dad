package mgmt

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/labctl/labctl/internal/cloudinit"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/files"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/redact"
	"github.com/labctl/labctl/internal/sshkey"
	"github.com/labctl/labctl/internal/step"
	"github.com/labctl/labctl/internal/ui"
	"github.com/labctl/labctl/internal/vmssh"
)

// Installer is 'labctl mgmt install' as mgmt up runs it last. The
// management-stack use case implements it.
type Installer interface {
	// K3sManifests are files for k3s's auto-deploy folder (HelmChart
	// objects), placed by cloud-init when the VM is created. May be empty.
	K3sManifests(lab *config.Lab) ([]cloudinit.File, error)
	// Check refuses a lab that Install would refuse, before mgmt up makes
	// anything; a dry run reads no secret.
	Check(lab *config.Lab, dryRun bool) error
	// Install installs the management stack onto the cluster the
	// kubeconfig file reaches and waits until it is ready.
	Install(ctx context.Context, lab *config.Lab, kubeconfig string) error
}

// DriverFunc opens the driver of the lab's hypervisor called name (the
// command factory's Driver; tests hand in their own).
type DriverFunc func(ctx context.Context, name string) (hypervisor.Driver, error)

// UpOptions are the inputs of 'labctl mgmt up'.
type UpOptions struct {
	IO *ui.IO
	// Lab is the loaded lab, and Source where it was read from.
	Lab     *config.Lab
	Source  config.Source
	DryRun  bool
	Verbose int
	// Driver opens the management hypervisor.
	Driver DriverFunc
	// Installer runs mgmt install (default: StackInstaller, the real one).
	Installer Installer
	// AddressTimeout and APITimeout bound the waits (default 15 min each:
	// a VM without hardware virtualisation boots slowly).
	AddressTimeout, APITimeout time.Duration
}

// Up loads the lab, opens its management hypervisor and runs the steps.
func Up(ctx context.Context, o UpOptions) error {
	lab := o.Lab
	fmt.Fprintf(o.IO.Err, "lab %s (%s), management VM %s on hypervisor %s\n", lab.Metadata.Name, o.Source, lab.Management.Name, lab.Management.Hypervisor)
	drv, err := o.Driver(ctx, lab.Management.Hypervisor)
	if err != nil {
		return dryRunReach(o.DryRun, lab, lab.Management.Hypervisor, err)
	}
	defer func() { _ = drivers.Close(drv) }()
	u, err := NewUp(lab, drv, o)
	if err != nil {
		return err
	}
	r := &step.Runner{IO: o.IO, DryRun: o.DryRun, Verbose: o.Verbose}
	if err := r.Run(ctx, u.Steps()); err != nil {
		return err
	}
	if o.DryRun {
		fmt.Fprintln(o.IO.Err, "dry run: nothing was changed")
		return nil
	}
	fmt.Fprintf(o.IO.Err, "management cluster is up: export KUBECONFIG=%s\n", u.kubeconfig)
	return nil
}

// UpRun is one mgmt up over one driver: kind's action context. What the
// steps find on the way (the image, the VM, its address) comes from lazy
// getters that look when asked, so no step depends on an earlier step's
// plan having filled a field, and a dry run runs the same list.
type UpRun struct {
	lab        *config.Lab
	drv        hypervisor.Driver
	opts       UpOptions
	image      hypervisor.ImageSpec
	keys       []string
	static     netip.Prefix // zero for DHCP
	kubeconfig string
	apiPort    uint16 // k3s's 6443; tests point it at the test bed
	sshPort    uint16 // sshd's 22; tests point it at their sshd
	// hostKeyFile holds the VM's SSH host key (0600), which labctl makes
	// and hands over through cloud-init, so the VM is known before it
	// is reached.
	hostKeyFile string
	auth        []ssh.Signer // the user's key, to read the kubeconfig

	img  step.Found[hypervisor.Image]
	vm   step.Found[hypervisor.VM]
	addr step.Found[netip.Addr]
	// unreached is set in a dry run whose hypervisor did not answer: the
	// plan goes on, and each line it could not check says so.
	unreached *hypervisor.Unreachable
}

// NewUp checks what the steps need from the config before anything runs:
// SSH keys, sizes, the address and where the kubeconfig goes.
func NewUp(lab *config.Lab, drv hypervisor.Driver, o UpOptions) (*UpRun, error) {
	m := lab.Management
	u := &UpRun{lab: lab, drv: drv, opts: o, apiPort: 6443, sshPort: 22}
	if u.opts.Installer == nil {
		u.opts.Installer = &StackInstaller{IO: o.IO, Verbose: o.Verbose, Connect: kube.Connect}
	}
	if u.opts.AddressTimeout == 0 {
		u.opts.AddressTimeout = 15 * time.Minute
	}
	if u.opts.APITimeout == 0 {
		u.opts.APITimeout = 15 * time.Minute
	}
	if err := u.opts.Installer.Check(lab, o.DryRun); err != nil {
		return nil, fmt.Errorf("mgmt install would refuse this lab after the VM is made, so nothing was made: %w", err)
	}
	u.image = hypervisor.ImageSpec{Node: m.Node, URL: m.Image.URL, Checksum: m.Image.Checksum, ChecksumURL: m.Image.ChecksumURL}
	if iu, err := url.Parse(m.Image.URL); err == nil {
		u.image.FileName = path.Base(iu.Path)
	}
	keys, err := sshkey.Authorized(m.SSHPublicKeys, m.SSHPublicKeyFile)
	if err != nil {
		return nil, err
	}
	u.keys = keys
	if m.IP != "" {
		ip, err := netip.ParseAddr(m.IP)
		if err != nil {
			return nil, fmt.Errorf("management.ip %q: %w", m.IP, err)
		}
		subnet, err := netip.ParsePrefix(lab.Network.CIDR)
		if err != nil {
			return nil, fmt.Errorf("network.cidr %q: %w", lab.Network.CIDR, err)
		}
		u.static = netip.PrefixFrom(ip, subnet.Bits())
	}
	if u.kubeconfig, err = kube.MgmtKubeconfigPath(lab.Metadata.Name); err != nil {
		return nil, err
	}
	if u.hostKeyFile, err = MgmtHostKeyPath(lab.Metadata.Name); err != nil {
		return nil, err
	}
	if _, err := u.vmSpec(hypervisor.Image{}, nil, nil); err != nil {
		return nil, err
	}
	if !o.DryRun {
		// Before anything is made: without the private half of an
		// authorized key, labctl could not read the kubeconfig.
		if u.auth, err = vmssh.UserAuth(u.keys, m.SSHPublicKeyFile); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// dryRunReach explains an error opening a hypervisor during a dry run: the
// plan is made from what the hypervisor holds, so there is no plan without
// it, and the user should know that is why a dry run wants its secret.
func dryRunReach(dry bool, lab *config.Lab, name string, err error) error {
	if !dry {
		return err
	}
	what := "hypervisor " + name
	for _, h := range lab.Hypervisors {
		switch {
		case h.Name != name:
		case h.Proxmox != nil:
			what = fmt.Sprintf("Proxmox VE hypervisor %s (%s)", name, redact.URL(h.Proxmox.URL))
		case h.Libvirt != nil:
			what = fmt.Sprintf("libvirt hypervisor %s (%s)", name, redact.URL(h.Libvirt.URI))
		}
	}
	return fmt.Errorf("the dry run asks %s which VMs already exist, so it must reach it: %w", what, err)
}

// MgmtHostKeyFile is the management VM's SSH host key in the lab's state
// folder, beside its kubeconfig.
const MgmtHostKeyFile = "mgmt-ssh-host-key"

// MgmtHostKeyPath is $XDG_CONFIG_HOME/labctl/<lab>/mgmt-ssh-host-key.
func MgmtHostKeyPath(lab string) (string, error) {
	return files.StatePath(lab, MgmtHostKeyFile)
}

// vmSpec renders the management VM: k3s at the pinned version with
// traefik off and the VM's address in its certificate, the installer's
// manifests in k3s's auto-deploy folder, and a static address when
// management.ip is set.
func (u *UpRun) vmSpec(img hypervisor.Image, manifests []cloudinit.File, hostKey *cloudinit.HostKey) (hypervisor.VMSpec, error) {
	m := u.lab.Management
	memMiB, err := u.memoryMiB()
	if err != nil {
		return hypervisor.VMSpec{}, err
	}
	disk, err := resource.ParseQuantity(m.Size.Disk)
	if err != nil {
		return hypervisor.VMSpec{}, fmt.Errorf("management.size.disk %q: %w", m.Size.Disk, err)
	}
	mac := hypervisor.StableMAC(u.lab.Metadata.Name, m.Name)
	k3s := &cloudinit.K3s{Version: m.K3sVersion, Manifests: manifests}
	if u.static.IsValid() {
		k3s.TLSSANs = []string{u.static.Addr().String()}
	}
	ud, err := cloudinit.UserData(cloudinit.Config{Hostname: m.Name, User: m.User, SSHKeys: u.keys, HostKey: hostKey, K3s: k3s})
	if err != nil {
		return hypervisor.VMSpec{}, fmt.Errorf("management VM: %w", err)
	}
	spec := hypervisor.VMSpec{
		Lab: u.lab.Metadata.Name, Name: m.Name, Node: m.Node, ID: m.VMID,
		CPUs: m.Size.CPUs, MemoryMiB: memMiB, DiskGiB: int(disk.Value() >> 30),
		Image:   img,
		Network: hypervisor.NetworkSpec{VLAN: u.lab.Network.VLAN, MAC: mac},
		CloudInit: hypervisor.CloudInit{
			Hostname: m.Name, User: m.User, SSHKeys: u.keys, UserData: ud,
		},
	}
	if u.static.IsValid() {
		var dns []netip.Addr
		for _, d := range u.lab.Network.DNS {
			if a, err := netip.ParseAddr(d); err == nil {
				dns = append(dns, a)
			}
		}
		gw, _ := netip.ParseAddr(u.lab.Network.Gateway)
		nc, err := cloudinit.NetworkConfig(cloudinit.Static{MAC: mac, Address: u.static, Gateway: gw, DNS: dns})
		if err != nil {
			return hypervisor.VMSpec{}, fmt.Errorf("management VM: %w", err)
		}
		spec.CloudInit.NetworkConfig = nc
		spec.CloudInit.Address, spec.CloudInit.Gateway, spec.CloudInit.DNSServers = u.static, gw, dns
	}
	return spec, nil
}

// Steps are mgmt up in order. Each looks at the real state first.
func (u *UpRun) Steps() []step.Step {
	m := u.lab.Management
	var steps []step.Step
	connect, ok := drivers.ConnectStep(u.drv)
	if u.opts.DryRun {
		connect, ok = drivers.DryConnectStep(u.drv, func(r hypervisor.Unreachable) { u.unreached = &r })
	}
	if ok {
		steps = append(steps, connect)
	}
	if hp, ok := u.drv.(hypervisor.HostPreparer); ok {
		steps = append(steps, step.Step{
			Name:  "prepare hypervisor " + u.drv.Name(),
			Plan:  hp.PlanHost,
			Apply: hp.PrepareHost,
		})
	}
	return append(steps,
		step.Step{Name: "cloud image " + u.image.FileName, Plan: u.planImage, Apply: u.applyImage},
		step.Step{Name: "create VM " + m.Name, Plan: u.planCreate, Apply: u.applyCreate},
		step.Step{Name: "size of VM " + m.Name, Check: u.checkSize},
		step.Step{Name: "start VM " + m.Name, Plan: u.planStart, Apply: u.applyStart},
		step.Step{Name: "wait for the address of " + m.Name, Apply: u.waitAddress},
		step.Step{Name: "wait for the k3s API", Apply: u.waitAPI},
		step.Step{Name: "store the kubeconfig", Plan: u.planKubeconfig, Apply: u.storeKubeconfig},
		step.Step{Name: "mgmt install", Plan: u.planInstall, Apply: u.install},
	)
}

// findVMNow asks the hypervisor for the management VM now, as a step's
// plan must, and remembers it when it exists.
func (u *UpRun) findVMNow(ctx context.Context) (hypervisor.VM, bool, error) {
	vm, err := u.drv.FindVM(ctx, u.lab.Metadata.Name, u.lab.Management.Name)
	if errors.Is(err, hypervisor.ErrNotFound) {
		return hypervisor.VM{}, false, nil
	}
	if err != nil {
		return hypervisor.VM{}, false, err
	}
	u.vm.Set(vm)
	return vm, true, nil
}

// requireVM is the management VM for a step that acts on it: the one a step
// made or found, else looked up.
func (u *UpRun) requireVM(ctx context.Context) (hypervisor.VM, error) {
	vm, found, err := u.vm.Get(ctx, u.findVMNow)
	if err == nil && !found {
		err = fmt.Errorf("VM %s of lab %s is not on %s", u.lab.Management.Name, u.lab.Metadata.Name, u.drv.Name())
	}
	return vm, err
}

// cloudImage is the cloud image on the hypervisor, put there if missing.
func (u *UpRun) cloudImage(ctx context.Context) (hypervisor.Image, error) {
	img, _, err := u.img.Get(ctx, func(ctx context.Context) (hypervisor.Image, bool, error) {
		img, err := u.drv.EnsureImage(ctx, u.image)
		return img, err == nil, err
	})
	return img, err
}

func (u *UpRun) planImage(ctx context.Context) ([]string, error) {
	var unchecked string
	if u.unreached != nil {
		unchecked = u.unreached.NotChecked("whether " + u.drv.Name() + " holds it already")
	} else {
		if _, ok, err := u.findVMNow(ctx); ok || err != nil {
			return nil, err // the VM exists: its image is not needed again
		}
		img, err := u.drv.FindImage(ctx, u.image)
		if err == nil {
			u.img.Set(img)
			return nil, nil
		}
		// Offline, the checksum list cannot be read, so neither can the
		// image's name on the host: the plan says what it could not check
		// (the apply needs the list, and stops there).
		var unread *hypervisor.ChecksumListError
		if !errors.Is(err, hypervisor.ErrNotFound) && !errors.As(err, &unread) {
			return nil, err
		}
		if unread != nil {
			unchecked = fmt.Sprintf("not checked: whether %s holds it already, since %v; management.image.checksum set to sha256:<hex> needs no list", u.drv.Name(), unread)
		}
	}
	check := u.image.Checksum
	if check == "" {
		check = "the sha256 listed in " + redact.URL(u.image.ChecksumURL)
	}
	line := fmt.Sprintf("download %s, check it against %s, and put it on %s", redact.URL(u.image.URL), check, u.drv.Name())
	return []string{withUnchecked(line, unchecked)}, nil
}

// withUnchecked ends a plan line with what was not checked, if anything.
func withUnchecked(line, unchecked string) string {
	if unchecked == "" {
		return line
	}
	return line + " (" + unchecked + ")"
}

func (u *UpRun) applyImage(ctx context.Context) error {
	_, err := u.cloudImage(ctx)
	return err
}

func (u *UpRun) planCreate(ctx context.Context) ([]string, error) {
	m := u.lab.Management
	var unchecked string
	if u.unreached != nil {
		unchecked = u.unreached.NotChecked("whether VM " + m.Name + " exists already")
	} else if _, ok, err := u.findVMNow(ctx); ok || err != nil {
		return nil, err
	}
	addr := "DHCP"
	if u.static.IsValid() {
		addr = u.static.String()
	}
	return []string{withUnchecked(fmt.Sprintf("create VM %s on %s: %d CPUs, %s memory, %s disk, address %s, k3s %s by cloud-init",
		m.Name, u.drv.Name(), m.Size.CPUs, m.Size.Memory, m.Size.Disk, addr, m.K3sVersion), unchecked)}, nil
}

// memoryMiB is management.size.memory in MiB, as the VM is made and
// compared.
func (u *UpRun) memoryMiB() (int, error) {
	mem, err := resource.ParseQuantity(u.lab.Management.Size.Memory)
	if err != nil {
		return 0, fmt.Errorf("management.size.memory %q: %w", u.lab.Management.Size.Memory, err)
	}
	return int(mem.Value() >> 20), nil
}

// checkSize compares the management VM with management.size. labctl
// does not resize it: a new size applies only when the VM restarts,
// which takes the management cluster down for that time, so that is the
// user's call. It says what differs and how to apply it, and goes on.
func (u *UpRun) checkSize(ctx context.Context) (string, error) {
	if u.unreached != nil {
		return "", &step.Warning{Detail: u.unreached.NotChecked("the size of VM " + u.lab.Management.Name + ", if it exists")}
	}
	vm, found, err := u.vm.Get(ctx, u.findVMNow)
	if err != nil || !found {
		return "made as management.size asks", err // a dry run before the create
	}
	m := u.lab.Management
	wantMiB, err := u.memoryMiB()
	if err != nil {
		return "", err
	}
	var diff []string
	if vm.CPUs != m.Size.CPUs {
		diff = append(diff, fmt.Sprintf("%d CPUs where management.size.cpus asks %d", vm.CPUs, m.Size.CPUs))
	}
	if vm.MemoryMiB != wantMiB {
		diff = append(diff, fmt.Sprintf("%s memory where management.size.memory asks %s", ui.GiB(vm.MemoryMiB), ui.GiB(wantMiB)))
	}
	if len(diff) == 0 {
		return fmt.Sprintf("%d CPUs, %s memory", vm.CPUs, ui.GiB(vm.MemoryMiB)), nil
	}
	restart := "the management cluster is down while the VM restarts; mgmt up does not do this for you"
	var fix []string
	if h, err := u.lab.Hypervisor(m.Hypervisor); err == nil && h.Libvirt != nil {
		c := "virsh -c " + redact.URL(h.Libvirt.URI)
		fix = []string{
			fmt.Sprintf("%s edit %s: <vcpu>%d</vcpu>, <memory unit='MiB'>%d</memory> and <currentMemory unit='MiB'>%d</currentMemory>", c, vm.Name, m.Size.CPUs, wantMiB, wantMiB),
			fmt.Sprintf("%s shutdown %s, and once it is off, %s start %s (%s)", c, vm.Name, c, vm.Name, restart),
		}
	} else {
		fix = []string{
			fmt.Sprintf("on node %s: qm set %d --cores %d --memory %d", vm.Node, vm.ID, m.Size.CPUs, wantMiB),
			fmt.Sprintf("qm reboot %d (%s)", vm.ID, restart),
		}
	}
	return "", &step.Warning{Detail: "VM " + vm.Name + " has " + strings.Join(diff, ", and "), Fix: fix}
}

func (u *UpRun) applyCreate(ctx context.Context) error {
	img, err := u.cloudImage(ctx)
	if err != nil {
		return err
	}
	manifests, err := u.opts.Installer.K3sManifests(u.lab)
	if err != nil {
		return fmt.Errorf("rendering the k3s manifests of mgmt install: %w", err)
	}
	hk, err := vmssh.LoadOrCreateHostKey(u.hostKeyFile)
	if err != nil {
		return err
	}
	spec, err := u.vmSpec(img, manifests, hk.CloudInit())
	if err != nil {
		return err
	}
	vm, err := u.drv.CreateVM(ctx, spec)
	if err != nil {
		return err
	}
	u.vm.Set(vm)
	return nil
}

func (u *UpRun) planStart(ctx context.Context) ([]string, error) {
	if u.unreached != nil {
		return []string{withUnchecked("start VM "+u.lab.Management.Name, u.unreached.NotChecked("whether it runs already"))}, nil
	}
	vm, ok, err := u.findVMNow(ctx)
	if err != nil {
		return nil, err
	}
	if ok && vm.Running {
		return nil, nil
	}
	return []string{"start VM " + u.lab.Management.Name}, nil
}

func (u *UpRun) applyStart(ctx context.Context) error {
	vm, err := u.requireVM(ctx)
	if err != nil {
		return err
	}
	return u.drv.StartVM(ctx, vm)
}

func (u *UpRun) waitAddress(ctx context.Context) error {
	addr, err := u.address(ctx)
	if err != nil {
		return err
	}
	how := "DHCP"
	if u.static.IsValid() {
		how = "management.ip in lab.yaml"
	}
	step.Progress(ctx, "%s (%s)", addr, how)
	return nil
}

// address is the VM's address: management.ip when lab.yaml sets it (the
// Ubuntu cloud image has no guest agent to report one; the next steps
// reach it there, or say they cannot), else the DHCP address the
// hypervisor reports, waited for within AddressTimeout.
func (u *UpRun) address(ctx context.Context) (netip.Addr, error) {
	addr, _, err := u.addr.Get(ctx, func(ctx context.Context) (netip.Addr, bool, error) {
		if u.static.IsValid() {
			return u.static.Addr(), true, nil
		}
		vm, err := u.requireVM(ctx)
		if err != nil {
			return netip.Addr{}, false, err
		}
		ctx, cancel := context.WithTimeout(ctx, u.opts.AddressTimeout)
		defer cancel()
		stop := ticker(ctx, "waiting for "+u.drv.Name()+" to report the DHCP address of "+vm.Name)
		defer stop()
		addr, err := u.drv.WaitAddress(ctx, vm)
		return addr, err == nil, err
	})
	return addr, err
}

// waitAPI waits until k3s serves HTTPS on 6443. Any HTTP answer counts:
// the anonymous request is refused until the kubeconfig is fetched.
func (u *UpRun) waitAPI(ctx context.Context) error {
	addr, err := u.address(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, u.opts.APITimeout)
	defer cancel()
	endpoint := "https://" + netip.AddrPortFrom(addr, u.apiPort).String() + "/readyz"
	stop := ticker(ctx, "waiting for "+endpoint)
	defer stop()
	// Only a liveness probe: no credentials go over it, and the stored
	// kubeconfig verifies the server with k3s's CA afterwards.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // probe only, see above
		DialContext:     (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}}
	defer client.CloseIdleConnections()
	wait := time.Second
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("k3s API at %s did not answer: %w (last: %v)", endpoint, ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(wait*2, 5*time.Second)
	}
}

func (u *UpRun) planKubeconfig(ctx context.Context) ([]string, error) {
	want := fmt.Sprintf("read %s from the VM over SSH (host key checked against %s), point it at https://<VM address>:6443 and store it at %s (mode 0600)", cloudinit.K3sKubeconfigPath, u.hostKeyFile, u.kubeconfig)
	if u.opts.DryRun { // the address and k3s were not waited for
		return []string{want}, nil
	}
	data, err := u.fetchKubeconfig(ctx)
	if err != nil {
		return nil, err
	}
	if have, err := os.ReadFile(u.kubeconfig); err == nil && string(have) == string(data) {
		return nil, nil
	}
	return []string{want}, nil
}

// fetchKubeconfig reads k3s's kubeconfig over SSH as the lab's user,
// checking the VM's host key against the one labctl gave it, waiting for
// sshd and for k3s to write the file, and rewrites it for use from
// outside the VM.
func (u *UpRun) fetchKubeconfig(ctx context.Context) ([]byte, error) {
	hk, err := vmssh.LoadHostKey(u.hostKeyFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("VM %s exists, but its SSH host key %s does not: labctl makes that key when it creates the VM, so this VM was made from another machine or the file was removed; copy %s from there, or run 'labctl mgmt down' and 'labctl mgmt up' to make the VM again", u.lab.Management.Name, u.hostKeyFile, filepath.Base(u.hostKeyFile))
	}
	if err != nil {
		return nil, err
	}
	if u.auth == nil {
		if u.auth, err = vmssh.UserAuth(u.keys, u.lab.Management.SSHPublicKeyFile); err != nil {
			return nil, err
		}
	}
	addr, err := u.address(ctx)
	if err != nil {
		return nil, err
	}
	t := vmssh.Target{Addr: netip.AddrPortFrom(addr, u.sshPort), User: u.lab.Management.User, HostKey: hk.PublicKey(), Auth: u.auth}
	ctx, cancel := context.WithTimeout(ctx, u.opts.APITimeout)
	defer cancel()
	began := time.Now()
	for {
		raw, err := vmssh.ReadFile(ctx, t, cloudinit.K3sKubeconfigPath)
		if err == nil {
			return rewriteKubeconfig(raw, addr, u.lab.Metadata.Name)
		}
		var what string
		switch {
		case errors.Is(err, vmssh.ErrNotReady):
			what = fmt.Sprintf("waiting for sshd on %s (host key %s)", t.Addr, hk.Fingerprint())
		case errors.Is(err, vmssh.ErrNotFound):
			what = fmt.Sprintf("waiting for k3s to write %s", cloudinit.K3sKubeconfigPath)
		default:
			return nil, err
		}
		step.Progress(ctx, "%s (%s)", what, ui.Duration(time.Since(began).Truncate(time.Second)))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(2 * time.Second):
		}
	}
}

// rewriteKubeconfig points every cluster at the VM's address, keeping the
// port, and names cluster, user and context "<lab>-mgmt".
func rewriteKubeconfig(raw []byte, addr netip.Addr, lab string) ([]byte, error) {
	cfg, err := clientcmd.Load(raw)
	if err != nil {
		return nil, fmt.Errorf("reading k3s's kubeconfig: %w", err)
	}
	if len(cfg.Clusters) != 1 || len(cfg.AuthInfos) != 1 || len(cfg.Contexts) != 1 {
		return nil, fmt.Errorf("k3s's kubeconfig has %d clusters, %d users and %d contexts; want one of each", len(cfg.Clusters), len(cfg.AuthInfos), len(cfg.Contexts))
	}
	name := lab + "-mgmt"
	out := clientcmdapi.NewConfig()
	for _, c := range cfg.Clusters {
		su, err := url.Parse(c.Server)
		if err != nil || su.Host == "" {
			return nil, fmt.Errorf("k3s's kubeconfig: server %q is not a URL", c.Server)
		}
		port := su.Port()
		if port == "" {
			port = "443"
		}
		su.Host = net.JoinHostPort(addr.String(), port)
		c.Server = su.String()
		out.Clusters[name] = c
	}
	for _, a := range cfg.AuthInfos {
		out.AuthInfos[name] = a
	}
	for _, c := range cfg.Contexts {
		c.Cluster, c.AuthInfo = name, name
		out.Contexts[name] = c
	}
	out.CurrentContext = name
	data, err := clientcmd.Write(*out)
	if err != nil {
		return nil, fmt.Errorf("writing the kubeconfig: %w", err)
	}
	return data, nil
}

// storeKubeconfig writes the kubeconfig 0600 (atomically) and checks that
// it reaches the API with k3s's credentials.
func (u *UpRun) storeKubeconfig(ctx context.Context) error {
	data, err := u.fetchKubeconfig(ctx)
	if err != nil {
		return err
	}
	if err := files.WritePrivate(u.kubeconfig, data); err != nil {
		return err
	}
	c, err := kube.Connect(u.kubeconfig)
	if err != nil {
		return err
	}
	v, err := c.ServerVersion(ctx)
	if err != nil {
		return fmt.Errorf("the stored kubeconfig %s does not reach the API: %w", u.kubeconfig, err)
	}
	step.Progress(ctx, "Kubernetes %s", v.GitVersion)
	return nil
}

// planInstall says what the last step does: mgmt install always runs, as
// it checks every component itself and changes only what differs.
func (u *UpRun) planInstall(context.Context) ([]string, error) {
	return []string{"install the management stack with mgmt install"}, nil
}

func (u *UpRun) install(ctx context.Context) error {
	return u.opts.Installer.Install(ctx, u.lab, u.kubeconfig)
}

// ticker reports how long a wait has taken on the step's line until stop.
func ticker(ctx context.Context, what string) (stop func()) {
	done := make(chan struct{})
	began := time.Now()
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				step.Progress(ctx, "%s (%s)", what, ui.Duration(time.Since(began).Truncate(time.Second)))
			}
		}
	}()
	return func() { close(done) }
}
