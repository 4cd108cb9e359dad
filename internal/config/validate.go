package config

import (
	"fmt"
	"math"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/labctl/labctl/internal/redact"
	"github.com/labctl/labctl/internal/sshkey"
)

// Bounds that come from the pinned stack.
const (
	maxKubernetesMinor = 35 // CAPMOX v0.9 is tested with CAPI 1.12, which caps workloads at 1.35
	minKubernetesMinor = 31
	minVMID            = 100
	maxVMID            = 999999999
)

var (
	dnsLabel      = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	tokenIDRe     = regexp.MustCompile(`^[^@!\s=]+@[^@!\s=]+![A-Za-z][A-Za-z0-9._-]*$`)
	fingerprintRe = regexp.MustCompile(`^([0-9A-Fa-f]{2}:){31}[0-9A-Fa-f]{2}$`)
	sha256Re      = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	envNameRe     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	kubeVersionRe = regexp.MustCompile(`^v1\.(\d+)\.(\d+)$`)
	k3sVersionRe  = regexp.MustCompile(`^v1\.\d+\.\d+\+k3s\d+$`)
	ciliumRe      = regexp.MustCompile(`^\d+\.\d+\.\d+$`)
	imageOSes     = []string{"ubuntu-2204", "ubuntu-2404"}
	domainTypes   = []string{"kvm", "qemu"}
)

// k3sCIDRs are the k3s defaults the management VM runs with.
var k3sCIDRs = []struct {
	what string
	pfx  netip.Prefix
}{
	{"k3s's pod network", netip.MustParsePrefix("10.42.0.0/16")},
	{"k3s's service network", netip.MustParsePrefix("10.43.0.0/16")},
}

// validator collects every problem before reporting.
type validator struct {
	lab  *Lab
	errs ErrorList

	subnet  netip.Prefix // network.cidr, when valid
	hvs     map[string]*Hypervisor
	nodes   map[string]map[string]*PVENode // Proxmox node by name, by hypervisor
	images  map[string]*Image              // the first image of each name
	ranges  []ipRange                      // node IP ranges of earlier clusters
	rangeOf []string                       // their paths
	vips    map[netip.Addr]string          // VIPs of earlier clusters: their paths
	ports   map[int]string                 // API ports of earlier tenants: their paths
	vmids   map[string]string              // hypervisor/vmid of the VMs labctl creates: their paths
	lan     []lanAddr                      // lanAddrs, once worked out
}

func (v *validator) add(p *field.Path, format string, args ...any) {
	v.errs = v.errs.collect(&Error{Field: p.String(), Msg: fmt.Sprintf(format, args...)})
}

// Validate checks a defaulted lab and returns every problem at once.
func Validate(lab *Lab) ErrorList {
	v := &validator{lab: lab, hvs: map[string]*Hypervisor{}, nodes: map[string]map[string]*PVENode{},
		images: map[string]*Image{}, vips: map[netip.Addr]string{}, ports: map[int]string{}, vmids: map[string]string{}}
	if lab.APIVersion != APIVersion {
		v.add(field.NewPath("apiVersion"), "must be %s, got %q", APIVersion, lab.APIVersion)
	}
	if lab.Kind != Kind {
		v.add(field.NewPath("kind"), "must be %s, got %q", Kind, lab.Kind)
	}
	v.name(field.NewPath("metadata", "name"), lab.Metadata.Name)
	v.network(field.NewPath("network"))
	v.hypervisors(field.NewPath("hypervisors"))
	v.urls()
	v.management(field.NewPath("management"))
	v.imageList(field.NewPath("images"))
	v.clusters(field.NewPath("clusters"))
	v.scaleTest(field.NewPath("scaleTest"))
	return v.errs
}

func (v *validator) name(p *field.Path, name string) {
	switch {
	case name == "":
		v.add(p, "is required: a lowercase name such as lab1")
	case !dnsLabel.MatchString(name):
		v.add(p, "%q must be lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters", name)
	}
}

func (v *validator) network(p *field.Path) {
	n := v.lab.Network
	if n.CIDR == "" {
		v.add(p.Child("cidr"), "is required: the VM subnet, e.g. 192.168.4.0/24")
	} else if pfx, err := netip.ParsePrefix(n.CIDR); err != nil || !pfx.Addr().Is4() {
		v.add(p.Child("cidr"), "%q is not an IPv4 CIDR such as 192.168.4.0/24", n.CIDR)
	} else if pfx.Masked() != pfx {
		v.add(p.Child("cidr"), "%q has host bits set; write %s", n.CIDR, pfx.Masked())
	} else if pfx.Bits() > 29 {
		v.add(p.Child("cidr"), "%q is too small for a lab; use /29 or larger", n.CIDR)
	} else {
		v.subnet = pfx
		for _, k := range k3sCIDRs {
			if pfx.Overlaps(k.pfx) {
				v.add(p.Child("cidr"), "%s overlaps %s %s on the management VM; pick a lab network outside it", pfx, k.what, k.pfx)
			}
		}
	}
	v.hostIP(p.Child("gateway"), n.Gateway, true)
	if n.VLAN < 0 || n.VLAN > 4094 {
		v.add(p.Child("vlan"), "must be between 1 and 4094 (or 0 for untagged), got %d", n.VLAN)
	}
	if len(n.DNS) == 0 {
		v.add(p.Child("dns"), "needs at least one DNS server, e.g. [%s]", orExample(n.Gateway, "192.168.4.1"))
	}
	first := make(map[netip.Addr]int, len(n.DNS))
	for i, d := range n.DNS {
		a, err := netip.ParseAddr(d)
		if err != nil || !a.Is4() {
			v.add(p.Child("dns").Index(i), "%q is not an IPv4 address", d)
		} else if j, dup := first[a]; dup {
			v.add(p.Child("dns").Index(i), "%s is listed twice (also dns[%d])", d, j)
		} else {
			first[a] = i
		}
	}
}

func orExample(s, example string) string {
	if s != "" {
		return s
	}
	return example
}

// hostIP checks that s is a usable address in the lab subnet.
func (v *validator) hostIP(p *field.Path, s string, required bool) (netip.Addr, bool) {
	if s == "" {
		if required {
			v.add(p, "is required: an IPv4 address in network.cidr")
		}
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		v.add(p, "%q is not an IPv4 address", s)
		return netip.Addr{}, false
	}
	if v.subnet.IsValid() {
		if !v.subnet.Contains(a) {
			v.add(p, "%s is outside network.cidr %s", a, v.subnet)
			return a, false
		}
		if a == v.subnet.Addr() || a == broadcast(v.subnet) {
			v.add(p, "%s is the network or broadcast address of %s; pick a host address", a, v.subnet)
			return a, false
		}
	}
	return a, true
}

func (v *validator) hypervisors(p *field.Path) {
	if len(v.lab.Hypervisors) == 0 {
		v.add(p, "needs at least one hypervisor: a proxmox endpoint or a libvirt host")
	}
	for i := range v.lab.Hypervisors {
		h := &v.lab.Hypervisors[i]
		hp := p.Index(i)
		v.name(hp.Child("name"), h.Name)
		if _, dup := v.hvs[h.Name]; dup && h.Name != "" {
			v.add(hp.Child("name"), "duplicate hypervisor name %q; each hypervisor needs its own name", h.Name)
		} else {
			v.hvs[h.Name] = h
		}
		switch {
		case h.Proxmox != nil && h.Libvirt != nil:
			v.add(hp, "sets both proxmox and libvirt; a hypervisor is one or the other")
		case h.Proxmox != nil:
			v.proxmox(hp.Child("proxmox"), h.Proxmox)
			if _, dup := v.nodes[h.Name]; !dup {
				v.nodes[h.Name] = map[string]*PVENode{}
				for j := range h.Proxmox.Nodes {
					if n := &h.Proxmox.Nodes[j]; v.nodes[h.Name][n.Name] == nil {
						v.nodes[h.Name][n.Name] = n
					}
				}
			}
		case h.Libvirt != nil:
			v.libvirt(hp.Child("libvirt"), h.Libvirt)
		default:
			v.add(hp, "needs a proxmox or a libvirt section")
		}
	}
}

func (v *validator) proxmox(p *field.Path, px *Proxmox) {
	if u, err := url.Parse(px.URL); px.URL == "" {
		v.add(p.Child("url"), "is required, e.g. https://192.168.0.8:8006")
	} else if err != nil || u.Scheme != "https" || u.Hostname() == "" || !validPort(u.Port()) {
		v.add(p.Child("url"), "%q must be an https URL such as https://192.168.0.8:8006", redact.URL(px.URL))
	}
	switch {
	case px.TokenID == "":
		v.add(p.Child("tokenID"), "is required: the API token id, user@realm!tokenname")
	case strings.Contains(px.TokenID, "="):
		v.add(p.Child("tokenID"), "must not contain the token secret; write only user@realm!tokenname and put the secret in tokenSecret.env or tokenSecret.file")
	case !tokenIDRe.MatchString(px.TokenID):
		// Not quoted: a malformed token id is often one with the secret pasted into it.
		v.add(p.Child("tokenID"), "is not user@realm!tokenname, e.g. root@pam!labctl; write only the token's id there, and the secret in tokenSecret")
	}
	v.secretRef(p.Child("tokenSecret"), px.TokenSecret)
	tp := p.Child("tls")
	if px.TLS.Fingerprint != "" && !fingerprintRe.MatchString(px.TLS.Fingerprint) {
		v.add(tp.Child("fingerprint"), "must be a SHA-256 fingerprint: 32 hex bytes separated by colons, as 'openssl x509 -noout -fingerprint -sha256' prints")
	}
	if px.TLS.CAFile != "" && px.TLS.Fingerprint != "" {
		v.add(tp, "sets both caFile and fingerprint; pick one way to trust the server")
	}
	if px.TLS.InsecureSkipVerify && (px.TLS.CAFile != "" || px.TLS.Fingerprint != "") {
		v.add(tp.Child("insecureSkipVerify"), "cannot be combined with caFile or fingerprint; drop insecureSkipVerify to keep verification on")
	}
	np := p.Child("nodes")
	if len(px.Nodes) == 0 {
		v.add(np, "needs at least one node, e.g. - {name: pv1-1, storage: local-lvm, imageStorage: local, bridge: vmbr0}")
	}
	seen := map[string]bool{}
	for i, n := range px.Nodes {
		ip := np.Index(i)
		v.name(ip.Child("name"), n.Name)
		if seen[n.Name] && n.Name != "" {
			v.add(ip.Child("name"), "duplicate node name %q", n.Name)
		}
		seen[n.Name] = true
		for _, f := range []struct{ name, val, eg string }{
			{"storage", n.Storage, "local-lvm"}, {"imageStorage", n.ImageStorage, "local"}, {"bridge", n.Bridge, "vmbr0"},
		} {
			if strings.TrimSpace(f.val) == "" {
				v.add(ip.Child(f.name), "is required, e.g. %s", f.eg)
			}
		}
	}
	if r := px.VMIDRange; r != nil {
		rp := p.Child("vmidRange")
		if r.Start < minVMID || r.End > maxVMID || r.Start > r.End {
			v.add(rp, "must satisfy %d <= start <= end <= %d, got %d-%d", minVMID, maxVMID, r.Start, r.End)
		}
	}
}

// validPort is an empty port or one from 1 to 65535.
func validPort(s string) bool {
	if s == "" {
		return true
	}
	n, err := strconv.Atoi(s)
	return err == nil && n >= 1 && n <= 65535
}

func (v *validator) secretRef(p *field.Path, s SecretRef) {
	switch {
	case s.Env == "" && s.File == "":
		v.add(p, "is required: name where the secret is kept, {env: PVE_TOKEN_SECRET} or {file: ~/.config/labctl/pve-token}")
	case s.Env != "" && s.File != "":
		v.add(p, "sets both env and file; pick one")
	case looksSecret(s.Env) && !envNameRe.MatchString(s.Env):
		v.add(p.Child("env"), "is not an environment variable name: it looks like the secret itself (not shown); name the variable that holds it, e.g. PVE_TOKEN_SECRET")
	case looksSecret(s.Env):
		v.add(p.Child("env"), "looks like the secret itself (not shown); name the variable that holds it, e.g. PVE_TOKEN_SECRET")
	case strings.HasPrefix(s.Env, "$"):
		v.add(p.Child("env"), "%q: write the variable's name without the $, e.g. %s", s.Env, strings.Trim(s.Env, "${}"))
	case s.Env != "" && !envNameRe.MatchString(s.Env):
		// Not quoted: what is no variable name may well be the secret.
		v.add(p.Child("env"), "is not an environment variable name (letters, digits and _, not starting with a digit); it names the variable, it is not the secret")
	case looksSecret(s.File):
		v.add(p.Child("file"), "looks like the secret itself (not shown); name the file that holds it, e.g. ~/.config/labctl/pve-token")
	}
}

func (v *validator) libvirt(p *field.Path, lv *Libvirt) {
	u, err := url.Parse(lv.URI)
	switch {
	case lv.URI == "":
		v.add(p.Child("uri"), "is required, e.g. qemu:///system or qemu+ssh://user@host/system")
	// test: and storage: are the test beds' daemons (libvirt's test
	// driver; its storage driver alone, libvirttest.StartStorage), not
	// told to users.
	case err != nil || (u.Scheme != "qemu" && u.Scheme != "qemu+ssh" && u.Scheme != "qemu+tls" && !testScheme(u.Scheme)):
		v.add(p.Child("uri"), "%q must be a qemu:///system, qemu+ssh://user@host/system or qemu+tls://host/system URI", redact.URL(lv.URI))
	case u.Scheme != "qemu" && !testScheme(u.Scheme) && u.Host == "":
		v.add(p.Child("uri"), "%q names no host; write %s://user@host/system", redact.URL(lv.URI), u.Scheme)
	case !testScheme(u.Scheme) && u.Path != "/system" && u.Path != "/session":
		v.add(p.Child("uri"), "%q must end in /system or /session", redact.URL(lv.URI))
	}
	if lv.Network != "" && lv.Bridge != "" {
		v.add(p, "sets both network and bridge; VMs attach to one of them")
	} else if lv.Network == "" && lv.Bridge == "" {
		v.add(p, "needs a network (a libvirt network name) or a bridge (a host bridge)")
	}
	if lv.DomainType != "" && !oneOf(lv.DomainType, domainTypes) {
		v.add(p.Child("domainType"), "must be kvm or qemu, got %q", lv.DomainType)
	}
	transport := ""
	if u != nil {
		_, transport, _ = strings.Cut(u.Scheme, "+")
	}
	switch {
	case lv.SSHKeyFile != "" && transport != "ssh":
		v.add(p.Child("sshKeyFile"), "is only for qemu+ssh:// URIs; drop it or change uri")
	case strings.HasSuffix(lv.SSHKeyFile, ".pub"):
		v.add(p.Child("sshKeyFile"), "%q is a public key; name the private key beside it, e.g. ~/.ssh/id_ed25519", lv.SSHKeyFile)
	}
	if t := lv.TLS; t != nil {
		switch {
		case transport != "tls":
			v.add(p.Child("tls"), "is only for qemu+tls:// URIs; drop it or change uri")
		case (t.CertFile == "") != (t.KeyFile == ""):
			v.add(p.Child("tls"), "sets one of certFile and keyFile; the client certificate and its key go together")
		}
	}
}

func testScheme(s string) bool { return s == "test" || s == "storage" }

func oneOf(s string, list []string) bool {
	for _, x := range list {
		if s == x {
			return true
		}
	}
	return false
}

// placement checks a hypervisor reference and, for Proxmox, the node on it.
func (v *validator) placement(hp, np *field.Path, hypervisor, node string) *Hypervisor {
	if len(v.lab.Hypervisors) == 0 {
		return nil // reported at hypervisors
	}
	if hypervisor == "" {
		v.add(hp, "is required when the lab has more than one hypervisor; name one of: %s", strings.Join(v.hypervisorNames(), ", "))
		return nil
	}
	h, ok := v.hvs[hypervisor]
	if !ok {
		v.add(hp, "unknown hypervisor %q; the lab has: %s", hypervisor, strings.Join(v.hypervisorNames(), ", "))
		return nil
	}
	if h.Proxmox != nil && np != nil && len(h.Proxmox.Nodes) > 0 {
		if node == "" {
			v.add(np, "is required: the Proxmox node, one of %s", strings.Join(nodeNames(h.Proxmox), ", "))
		} else if !v.hasNode(h, node) {
			v.add(np, "unknown node %q on hypervisor %s; it has: %s", node, h.Name, strings.Join(nodeNames(h.Proxmox), ", "))
		}
	}
	if h.Proxmox == nil && h.Libvirt != nil && np != nil && node != "" {
		v.add(np, "is only for Proxmox hypervisors; %s is a libvirt host, drop node", h.Name)
	}
	return h
}

func (v *validator) hypervisorNames() []string {
	var names []string
	for _, h := range v.lab.Hypervisors {
		names = append(names, h.Name)
	}
	return names
}

func nodeNames(px *Proxmox) []string {
	var names []string
	for _, n := range px.Nodes {
		names = append(names, n.Name)
	}
	return names
}

// hasNode reports whether Proxmox hypervisor h lists node name.
func (v *validator) hasNode(h *Hypervisor, name string) bool {
	return v.nodes[h.Name][name] != nil
}

// uniqueVMID checks that no two VMs labctl creates on one hypervisor share
// an id: the second create would fail, or clobber the first.
func (v *validator) uniqueVMID(p *field.Path, hypervisor string, id int) {
	key := fmt.Sprintf("%s/%d", hypervisor, id)
	if first, dup := v.vmids[key]; dup {
		v.add(p, "%d is already the VM id of %s; each VM needs its own id", id, first)
		return
	}
	v.vmids[key] = strings.TrimSuffix(p.String(), ".vmid")
}

func (v *validator) management(p *field.Path) {
	m := v.lab.Management
	h := v.placement(p.Child("hypervisor"), p.Child("node"), m.Hypervisor, m.Node)
	v.name(p.Child("name"), m.Name)
	if m.VMID != 0 {
		if m.VMID < minVMID || m.VMID > maxVMID {
			v.add(p.Child("vmid"), "must be between %d and %d, got %d", minVMID, maxVMID, m.VMID)
		} else if h != nil && h.Proxmox == nil && h.Libvirt != nil {
			v.add(p.Child("vmid"), "is only for Proxmox hypervisors; drop it for %s", h.Name)
		} else {
			v.uniqueVMID(p.Child("vmid"), m.Hypervisor, m.VMID)
		}
	}
	if ip, ok := v.hostIP(p.Child("ip"), m.IP, h != nil && h.Proxmox != nil); ok {
		for _, a := range v.lanAddrs() {
			if a.addr == ip {
				v.add(p.Child("ip"), "%s is %s; pick another address", ip, a.what)
				break
			}
		}
	}
	v.size(p.Child("size"), m.Size, 2, 2<<30)
	if !k3sVersionRe.MatchString(m.K3sVersion) {
		v.add(p.Child("k3sVersion"), "%q is not a k3s release such as v1.35.4+k3s1", m.K3sVersion)
	}
	v.cloudImage(p.Child("image"), m.Image)
	if m.User == "" || !dnsLabel.MatchString(m.User) {
		v.add(p.Child("user"), "%q is not a valid user name; use lowercase letters and digits, e.g. ubuntu", m.User)
	}
	if len(m.SSHPublicKeys) == 0 && m.SSHPublicKeyFile == "" {
		v.add(p, "needs sshPublicKeyFile or sshPublicKeys, or you cannot log in to the VM")
	}
	for i, k := range m.SSHPublicKeys {
		// The rule 'mgmt up' and 'cluster create' read the keys with.
		if err := sshkey.CheckPublic(k); err != nil {
			v.add(p.Child("sshPublicKeys").Index(i), "%s", err)
		}
	}
	if strings.Contains(m.SSHPublicKeyFile, "PRIVATE KEY") || (m.SSHPublicKeyFile != "" && !strings.HasSuffix(m.SSHPublicKeyFile, ".pub")) {
		v.add(p.Child("sshPublicKeyFile"), "must name a public key file ending in .pub, e.g. ~/.ssh/id_ed25519.pub")
	}
	v.stack(p.Child("stack"), m.Stack)
}

func (v *validator) stack(p *field.Path, s Stack) {
	for _, r := range []struct{ name, url string }{
		{"certManager", s.ChartRepos.CertManager}, {"clusterAPIOperator", s.ChartRepos.ClusterAPIOperator},
		{"cilium", s.ChartRepos.Cilium},
	} {
		if u, err := url.Parse(r.url); r.url != "" && (err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "") {
			v.add(p.Child("chartRepos", r.name), "%q must be the http(s) URL of a Helm chart repository (the folder holding index.yaml)", redact.URL(r.url))
		}
	}
	need := v.lab.Providers()
	for _, o := range []struct {
		name   string
		p      OptionalProvider
		needed bool
	}{{"kamaji", s.Kamaji, need.Kamaji}} {
		fp := p.Child(o.name, "fetchURL")
		if o.p.FetchURL == "" {
			continue
		}
		if !o.needed {
			v.add(fp, "is set but %s.enabled is not, and no cluster needs the provider; set enabled: true or drop fetchURL", o.name)
		}
		if u, err := url.Parse(o.p.FetchURL); err != nil || u.Scheme != "https" || u.Host == "" {
			v.add(fp, "%q must be an https URL of the provider's releases, e.g. https://github.com/OWNER/REPO/releases", redact.URL(o.p.FetchURL))
		}
	}
}

func (v *validator) cloudImage(p *field.Path, img CloudImage) {
	if u, err := url.Parse(img.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		v.add(p.Child("url"), "%q must be an http(s) URL of a cloud image", redact.URL(img.URL))
	}
	switch {
	case img.Checksum == "" && img.ChecksumURL == "":
		v.add(p, "needs checksum (sha256:<hex>) or checksumURL (a SHA256SUMS file); labctl never uses an unverified image")
	case img.Checksum != "" && img.ChecksumURL != "":
		v.add(p, "sets both checksum and checksumURL; pick one")
	case img.Checksum != "" && !sha256Re.MatchString(img.Checksum):
		v.add(p.Child("checksum"), "must be sha256: followed by 64 lowercase hex digits")
	case img.ChecksumURL != "":
		if u, err := url.Parse(img.ChecksumURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			v.add(p.Child("checksumURL"), "%q must be an http(s) URL of a SHA256SUMS file", redact.URL(img.ChecksumURL))
		}
	}
}

// size checks a VM size against a floor of CPUs and memory bytes.
func (v *validator) size(p *field.Path, s Size, minCPUs int, minMem int64) {
	if s.CPUs < 1 || s.CPUs > 512 {
		v.add(p.Child("cpus"), "must be between 1 and 512, got %d", s.CPUs)
	} else if s.CPUs < minCPUs {
		v.add(p.Child("cpus"), "must be at least %d here, got %d", minCPUs, s.CPUs)
	}
	if q, ok := v.quantity(p.Child("memory"), s.Memory, "2Gi or 512Mi"); ok && q.Value() < minMem {
		v.add(p.Child("memory"), "%s is too little; at least %s is needed", s.Memory, resource.NewQuantity(minMem, resource.BinarySI))
	}
	if q, ok := v.quantity(p.Child("disk"), s.Disk, "30Gi"); ok && q.Value() < 10<<30 {
		v.add(p.Child("disk"), "%s is too small for a node; use at least 10Gi", s.Disk)
	}
}

func (v *validator) quantity(p *field.Path, s, eg string) (resource.Quantity, bool) {
	q, err := resource.ParseQuantity(s)
	if err != nil || q.Sign() <= 0 {
		v.add(p, "%q is not a positive quantity such as %s", s, eg)
		return q, false
	}
	// Past int64 bytes, Value() wraps round (1e19 would read as too
	// little), and ParseQuantity caps 100Ei at exactly MaxInt64.
	if q.CmpInt64(math.MaxInt64) >= 0 {
		v.add(p, "%s is too large for any VM; write a size such as %s", s, eg)
		return q, false
	}
	return q, true
}

func (v *validator) imageList(p *field.Path) {
	for i, img := range v.lab.Images {
		ip := p.Index(i)
		v.name(ip.Child("name"), img.Name)
		if v.images[img.Name] != nil && img.Name != "" {
			v.add(ip.Child("name"), "duplicate image name %q", img.Name)
		} else if v.images[img.Name] == nil {
			v.images[img.Name] = &v.lab.Images[i]
		}
		if h := v.placement(ip.Child("hypervisor"), ip.Child("node"), img.Hypervisor, img.Node); h != nil {
			v.imageHosts(ip, h, img)
		}
		if !oneOf(img.OS, imageOSes) {
			v.add(ip.Child("os"), "%q is not supported; use one of %s", img.OS, strings.Join(imageOSes, ", "))
		}
		v.kubeVersion(ip.Child("kubernetesVersion"), img.KubernetesVersion)
		if h := v.hvs[img.Hypervisor]; h != nil && h.Proxmox == nil && img.VMID != 0 {
			v.add(ip.Child("vmid"), "is only for Proxmox templates; %s is a libvirt host, where the image is the volume %s: drop vmid", h.Name, img.VolumeName())
		} else if img.VMID != 0 && (img.VMID < minVMID || img.VMID > maxVMID) {
			v.add(ip.Child("vmid"), "must be between %d and %d, got %d", minVMID, maxVMID, img.VMID)
		} else if img.VMID != 0 {
			v.uniqueVMID(ip.Child("vmid"), img.Hypervisor, img.VMID)
		}
	}
}

func (v *validator) kubeVersion(p *field.Path, s string) bool {
	if err := CheckKubernetesVersion(s); err != nil {
		v.add(p, "%s", err)
		return false
	}
	return true
}

// CheckKubernetesVersion says why s cannot be a workload cluster's
// Kubernetes version: not vMAJOR.MINOR.PATCH, or outside what the pinned
// Cluster API and CAPMOX run. lab.yaml's validation and 'cluster upgrade
// --to' share it.
func CheckKubernetesVersion(s string) error {
	m := kubeVersionRe.FindStringSubmatch(s)
	if m == nil {
		return fmt.Errorf("%q is not a Kubernetes version such as v1.35.4", s)
	}
	var minor int
	fmt.Sscan(m[1], &minor)
	if minor > maxKubernetesMinor || minor < minKubernetesMinor {
		return fmt.Errorf("%s is not supported: Cluster API 1.12 with CAPMOX v0.9 runs v1.%d to v1.%d", s, minKubernetesMinor, maxKubernetesMinor)
	}
	return nil
}

// ClustersOn says why workload cluster machines cannot run on hypervisor
// h, or "" when they can: the one rule for clusters and their pools.
// Proxmox hypervisors take them through CAPMOX; libvirt hosts through
// labctl's own libvirt provider, which runs in the management cluster and
// so reaches a host over the network only.
func ClustersOn(h *Hypervisor) string {
	if h.Libvirt == nil || h.Proxmox != nil {
		return ""
	}
	if u, err := url.Parse(h.Libvirt.URI); err != nil || (u.Scheme != "qemu+ssh" && u.Scheme != "qemu+tls") {
		return fmt.Sprintf("%s is reached at %q, but cluster machines on libvirt hosts are made by labctl's libvirt provider in the management cluster, which reaches a host over qemu+ssh:// or qemu+tls:// only; give hypervisors[%s].libvirt.uri the host's remote URI, e.g. qemu+ssh://root@kvm1.lan/system", h.Name, redact.URL(h.Libvirt.URI), h.Name)
	}
	return ""
}

// imageHosts checks images[].hosts: the libvirt hypervisors a libvirt
// image is uploaded to. A Proxmox image is a template on its node and
// takes none.
func (v *validator) imageHosts(ip *field.Path, h *Hypervisor, img Image) {
	hp := ip.Child("hosts")
	if h.Proxmox != nil {
		if len(img.Hosts) > 0 {
			v.add(hp, "is only for libvirt images; %s is a Proxmox VE hypervisor, where the image is a template on node %s: drop hosts", h.Name, img.Node)
		}
		return
	}
	seen := map[string]bool{}
	for j, name := range img.Hosts {
		o, ok := v.hvs[name]
		switch {
		case !ok:
			v.add(hp.Index(j), "unknown hypervisor %q; the lab has: %s", name, strings.Join(v.hypervisorNames(), ", "))
		case o.Proxmox != nil:
			v.add(hp.Index(j), "%s is a Proxmox VE hypervisor; list only libvirt hosts here (a Proxmox image is an image of its own, with hypervisor and node)", name)
		case seen[name]:
			v.add(hp.Index(j), "lists %s twice", name)
		}
		seen[name] = true
	}
	if len(img.Hosts) > 0 && !seen[h.Name] {
		v.add(hp, "does not list %s, the image's hypervisor; add it, or set hypervisor to one of the hosts", h.Name)
	}
}

func (v *validator) clusters(p *field.Path) {
	names := map[string]bool{}
	// Addresses in use that VIPs and node ranges must stay clear of.
	taken := map[netip.Addr]string{}
	for _, a := range v.lanAddrs() {
		taken[a.addr] = a.what
	}
	if mgmtIP, err := netip.ParseAddr(v.lab.Management.IP); err == nil {
		if _, ok := taken[mgmtIP]; !ok {
			taken[mgmtIP] = "the management VM's IP"
		}
	}
	sortedTaken := sortedAddrs(taken)
	for i := range v.lab.Clusters {
		c := &v.lab.Clusters[i]
		cp := p.Index(i)
		v.name(cp.Child("name"), c.Name)
		if names[c.Name] && c.Name != "" {
			v.add(cp.Child("name"), "duplicate cluster name %q", c.Name)
		}
		names[c.Name] = true
		h := v.placement(cp.Child("hypervisor"), nil, c.Hypervisor, "")
		if h != nil {
			if why := ClustersOn(h); why != "" {
				v.add(cp.Child("hypervisor"), "%s", why)
				h = nil
			}
		}
		switch {
		case h != nil && h.Proxmox != nil && len(h.Proxmox.Nodes) > 0:
			v.allowedNodes(cp, c, h)
		case h != nil && h.Proxmox == nil && len(c.AllowedNodes) > 0:
			v.add(cp.Child("allowedNodes"), "is only for Proxmox hypervisors; %s is a libvirt host, drop allowedNodes", h.Name)
		}
		// Control plane and workers.
		var versionOK bool
		r := c.ControlPlane.Replicas
		cpVMs := r // machines the node range must hold for the control plane
		switch c.ControlPlane.Provider {
		case "", ControlPlaneKubeadm:
			versionOK = v.kubeVersion(cp.Child("kubernetesVersion"), c.KubernetesVersion)
			if r != 1 && r != 3 && r != 5 {
				// etcd needs an odd count for quorum; above 5 members every
				// write waits on more peers for no gain in a lab.
				v.add(cp.Child("controlPlane", "replicas"), "must be an odd number (1, 3 or 5) so etcd keeps quorum, got %d", r)
			}
			v.size(cp.Child("controlPlane", "size"), c.ControlPlane.Size, 2, 2<<30)
			if c.ControlPlane.Port != 0 {
				v.add(cp.Child("controlPlane", "port"), "is for Kamaji control planes (provider: kamaji); a kubeadm control plane listens on %d at its VIP, controlPlane.endpoint: drop port", kubeadmAPIPort)
			}
		case ControlPlaneKamaji:
			versionOK = v.kamaji(cp, c, h)
			cpVMs = 0
		default:
			versionOK = v.kubeVersion(cp.Child("kubernetesVersion"), c.KubernetesVersion)
			v.add(cp.Child("controlPlane", "provider"), "%q is not a control plane provider; use kubeadm (control-plane VMs with a kube-vip VIP, the default) or kamaji (a hosted control plane in the management cluster, docs/tenants.md)", c.ControlPlane.Provider)
		}
		maxWorkers := v.pools(cp, c, h)
		v.autoscaler(cp.Child("autoscaler"), c.Autoscaler)

		// Addresses: the VIP, the node range, pod and service CIDRs.
		var vip netip.Addr
		vipOK := false
		if !c.Kamaji() {
			vip, vipOK = v.hostIP(cp.Child("controlPlane", "endpoint"), c.ControlPlane.Endpoint, true)
		}
		if vipOK {
			if what, ok := taken[vip]; ok {
				v.add(cp.Child("controlPlane", "endpoint"), "%s is %s; the VIP needs an address of its own", vip, what)
			}
			if other, ok := v.vips[vip]; ok {
				v.add(cp.Child("controlPlane", "endpoint"), "%s is also the endpoint of %s; each cluster needs its own VIP", vip, other)
			} else {
				v.vips[vip] = cp.String()
			}
		}
		rp := cp.Child("nodeIPRange")
		rng, rngOK := v.ipRange(rp, c.NodeIPRange)
		if rngOK {
			if need := maxWorkers + cpVMs; rng.size() < need && cpVMs == 0 {
				v.add(rp, "holds %d addresses, but %s need %d; widen the range", rng.size(), maxWhat(c), need)
			} else if rng.size() < need {
				v.add(rp, "holds %d addresses, but %s (%d) + controlPlane.replicas (%d) need %d; widen the range", rng.size(), maxWhat(c), maxWorkers, r, need)
			}
			if vipOK && rng.contains(vip) {
				v.add(cp.Child("controlPlane", "endpoint"), "%s is inside nodeIPRange %s; the VIP must be outside the range nodes get their addresses from", vip, c.NodeIPRange)
			}
			for _, a := range addrsIn(sortedTaken, rng.first, rng.last) {
				v.add(rp, "contains %s %s; nodes would take that address, so move the range", taken[a], a)
			}
			for j, other := range v.ranges {
				if rng.overlaps(other) {
					v.add(rp, "overlaps %s (%s); clusters need separate ranges", v.rangeOf[j], other)
				}
			}
			v.ranges = append(v.ranges, rng)
			v.rangeOf = append(v.rangeOf, rp.String())
		}
		pod := v.cidr(cp.Child("podCIDR"), c.PodCIDR)
		svc := v.cidr(cp.Child("serviceCIDR"), c.ServiceCIDR)
		if pod.IsValid() && v.subnet.IsValid() && pod.Overlaps(v.subnet) {
			v.add(cp.Child("podCIDR"), "%s overlaps the lab network %s; pick a range outside it, e.g. %s", pod, v.subnet, v.freeCIDR(DefaultPodCIDR, svc))
		}
		if svc.IsValid() && v.subnet.IsValid() && svc.Overlaps(v.subnet) {
			v.add(cp.Child("serviceCIDR"), "%s overlaps the lab network %s; pick a range outside it, e.g. %s", svc, v.subnet, v.freeCIDR(DefaultServiceCIDR, pod))
		}
		if pod.IsValid() && svc.IsValid() && pod.Overlaps(svc) {
			v.add(cp.Child("serviceCIDR"), "%s overlaps podCIDR %s; pick a range clear of it, e.g. %s", svc, pod, v.freeCIDR(DefaultServiceCIDR, pod))
		}
		if pod.IsValid() && pod.Bits() > 24 {
			v.add(cp.Child("podCIDR"), "%s is too small: each node takes a /24; use /16", pod)
		}

		if c.MemoryAdjustment < 1 || c.MemoryAdjustment > 1000 {
			v.add(cp.Child("memoryAdjustment"), "must be a percentage between 1 and 1000 (100 means no overcommit), got %d", c.MemoryAdjustment)
		}
		v.template(cp, c, h, versionOK)
		v.lanAddresses(cp, pod, svc)
		if !ciliumRe.MatchString(c.CNI.Cilium) {
			v.add(cp.Child("cni", "cilium"), "%q is not a Cilium chart version such as 1.18.4", c.CNI.Cilium)
		}
	}
	v.vipsOutsideRanges(p)
}

// allowedNodes checks clusters[].allowedNodes against hypervisor h: each
// a node of it, once, and all on one bridge and storage, because the
// cluster's ProxmoxMachineTemplates name one of each.
func (v *validator) allowedNodes(cp *field.Path, c *Cluster, h *Hypervisor) {
	first := map[string]int{}
	for j, n := range c.AllowedNodes {
		ap := cp.Child("allowedNodes").Index(j)
		if !v.hasNode(h, n) {
			v.add(ap, "unknown node %q on hypervisor %s; it has: %s", n, h.Name, strings.Join(nodeNames(h.Proxmox), ", "))
		} else if k, dup := first[n]; dup {
			v.add(ap, "%s is listed twice (also allowedNodes[%d])", n, k)
		} else {
			first[n] = j
		}
	}
	nodes, whose := c.AllowedNodes, "its allowedNodes"
	if len(nodes) == 0 {
		// CAPMOX may then place machines on any node of the hypervisor.
		nodes, whose = nodeNames(h.Proxmox), "the nodes of hypervisor "+h.Name+" (it sets no allowedNodes)"
	}
	var base *PVENode
	for _, name := range nodes {
		n := v.nodes[h.Name][name]
		switch {
		case n == nil:
		case base == nil:
			base = n
		case n.Bridge != base.Bridge || n.Storage != base.Storage:
			v.add(cp.Child("allowedNodes"), "%s differ in bridge or storage: %s has %s/%s, %s has %s/%s; the cluster's machine templates name one of each, so list in allowedNodes only nodes that share both",
				whose, base.Name, base.Bridge, base.Storage, n.Name, n.Bridge, n.Storage)
			return
		}
	}
}

// sortedAddrs are the keys of m in address order.
func sortedAddrs(m map[netip.Addr]string) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// addrsIn are the addresses of sorted between first and last, inclusive.
func addrsIn(sorted []netip.Addr, first, last netip.Addr) []netip.Addr {
	lo, _ := slices.BinarySearchFunc(sorted, first, netip.Addr.Compare)
	hi := lo
	for hi < len(sorted) && sorted[hi].Compare(last) <= 0 {
		hi++
	}
	return sorted[lo:hi]
}

// freeCIDR suggests a range the size of preferred that is clear of the
// lab network, k3s's networks on the management VM, the LAN addresses
// nodes must reach, and also: preferred itself when it is clear, else the
// first clear block of that size in the private ranges. The suggestion is
// never the range just refused.
func (v *validator) freeCIDR(preferred string, also netip.Prefix) string {
	want := netip.MustParsePrefix(preferred)
	avoid := []netip.Prefix{}
	if v.subnet.IsValid() {
		avoid = append(avoid, v.subnet)
	}
	if also.IsValid() {
		avoid = append(avoid, also)
	}
	for _, k := range k3sCIDRs {
		avoid = append(avoid, k.pfx)
	}
	clear := func(p netip.Prefix) bool {
		for _, a := range avoid {
			if p.Overlaps(a) {
				return false
			}
		}
		for _, a := range v.lanAddrs() {
			if p.Contains(a.addr) {
				return false
			}
		}
		return true
	}
	if clear(want) {
		return want.String()
	}
	step := uint32(1) << (32 - want.Bits())
	for _, space := range []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"} {
		sp := netip.MustParsePrefix(space)
		if sp.Bits() > want.Bits() {
			continue
		}
		start := u32(sp.Addr().As4())
		for n := uint32(0); n < 1<<(want.Bits()-sp.Bits()); n++ {
			a := start + n*step
			p := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}), want.Bits())
			if clear(p) {
				return p.String()
			}
		}
	}
	return "a private range clear of the lab network, the podCIDR and the LAN"
}

// vipsOutsideRanges checks every VIP against the node ranges of the other
// clusters: nodes there would get the VIP as their address.
func (v *validator) vipsOutsideRanges(p *field.Path) {
	// Clusters are at most maxListEntries, so this is at most a million
	// comparisons of two addresses.
	for i, c := range v.lab.Clusters {
		vip, err := netip.ParseAddr(c.ControlPlane.Endpoint)
		if err != nil {
			continue
		}
		own := p.Index(i).Child("nodeIPRange").String() // checked in clusters
		for j, r := range v.ranges {
			if v.rangeOf[j] != own && r.contains(vip) {
				v.add(p.Index(i).Child("controlPlane", "endpoint"), "%s is inside %s (%s); the VIP must be outside every cluster's node range", vip, v.rangeOf[j], r)
			}
		}
	}
}

// lanAddr is an address on the LAN that something else already uses.
type lanAddr struct {
	what string // e.g. "the gateway"
	addr netip.Addr
}

// lanAddrs are the gateway, the DNS servers and the Proxmox hosts named by
// address, each address once, in that order. Worked out once.
func (v *validator) lanAddrs() []lanAddr {
	if v.lan != nil {
		return v.lan
	}
	addrs := []lanAddr{}
	seen := map[netip.Addr]bool{}
	add := func(what, s string) {
		a, err := netip.ParseAddr(s)
		if err != nil || seen[a] {
			return
		}
		seen[a] = true
		addrs = append(addrs, lanAddr{what, a})
	}
	add("the gateway", v.lab.Network.Gateway)
	for _, d := range v.lab.Network.DNS {
		add("the DNS server", d)
	}
	for _, h := range v.lab.Hypervisors {
		if h.Proxmox == nil {
			continue
		}
		if u, err := url.Parse(h.Proxmox.URL); err == nil {
			add("the address of hypervisor "+h.Name, u.Hostname())
		}
	}
	v.lan = addrs
	return addrs
}

// lanAddresses checks that the pod and service CIDRs leave the addresses
// nodes must reach on the LAN alone: DNS servers and the Proxmox API.
func (v *validator) lanAddresses(cp *field.Path, pod, svc netip.Prefix) {
	addrs := v.lanAddrs()
	for _, c := range []struct {
		name, eg   string
		pfx, other netip.Prefix
	}{{"podCIDR", DefaultPodCIDR, pod, svc}, {"serviceCIDR", DefaultServiceCIDR, svc, pod}} {
		if !c.pfx.IsValid() || (v.subnet.IsValid() && c.pfx.Overlaps(v.subnet)) {
			continue // invalid or overlapping the lab network: reported already
		}
		for _, a := range addrs {
			if c.pfx.Contains(a.addr) {
				v.add(cp.Child(c.name), "%s contains %s %s; pick a range outside the LAN, e.g. %s", c.pfx, a.what, a.addr, v.freeCIDR(c.eg, c.other))
				break
			}
		}
	}
}

func (v *validator) template(cp *field.Path, c *Cluster, h *Hypervisor, versionOK bool) {
	p := cp.Child("template")
	t := c.Template
	// By kind, even when the hypervisor was refused for clusters above.
	if k := v.hvs[c.Hypervisor]; k != nil && k.Proxmox == nil && k.Libvirt != nil {
		v.volumeTemplate(p, t, c, []*Hypervisor{k})
		return
	}
	switch {
	case t.Volume != "":
		v.add(p.Child("volume"), "is for clusters on libvirt hosts; %s is a Proxmox hypervisor, so drop volume and use image or templateID", c.Hypervisor)
	case t.Image != "" && (t.TemplateID != 0 || t.SourceNode != ""):
		v.add(p, "sets image and templateID/sourceNode; use one: image finds the template by its tags")
	case t.Image != "":
		img := v.image(t.Image)
		switch {
		case img == nil:
			v.add(p.Child("image"), "unknown image %q; add it under images or set templateID and sourceNode", t.Image)
		case h != nil && v.hvs[img.Hypervisor] != nil && img.Hypervisor != c.Hypervisor:
			v.add(p.Child("image"), "image %q is built on hypervisor %s, but the cluster runs on %s; build an image there", t.Image, img.Hypervisor, c.Hypervisor)
		case versionOK && img.KubernetesVersion != c.KubernetesVersion:
			v.add(cp.Child("kubernetesVersion"), "%s does not match %s of its template image %q; the nodes' kubelet and kubeadm come from the image, so set both to the same version", c.KubernetesVersion, img.KubernetesVersion, t.Image)
		default:
			v.templateNodeAllowed(cp, c, h, img.Node, fmt.Sprintf("the template of image %q", t.Image))
		}
	case t.TemplateID != 0:
		if t.TemplateID < minVMID || t.TemplateID > maxVMID {
			v.add(p.Child("templateID"), "must be a VM id between %d and %d, got %d", minVMID, maxVMID, t.TemplateID)
		} else if m := v.lab.Management; t.TemplateID == m.VMID && c.Hypervisor == m.Hypervisor {
			v.add(p.Child("templateID"), "%d is the management VM's id, not a template; use the id the image build printed", t.TemplateID)
		}
		if t.SourceNode == "" {
			v.add(p.Child("sourceNode"), "is required with templateID: the node that holds the template")
		} else if h != nil && h.Proxmox != nil && len(h.Proxmox.Nodes) > 0 && !v.hasNode(h, t.SourceNode) {
			v.add(p.Child("sourceNode"), "unknown node %q on hypervisor %s", t.SourceNode, h.Name)
		} else {
			v.templateNodeAllowed(cp, c, h, t.SourceNode, fmt.Sprintf("template %d (template.sourceNode)", t.TemplateID))
		}
	default:
		v.add(p, "needs image (a name under images) or templateID with sourceNode")
	}
}

// templateNodeAllowed checks that the node holding the cluster's template
// is one of its allowedNodes: CAPMOX clones every machine onto that node
// (the disks are node-local), so a cluster allowed elsewhere only could
// never get a VM.
func (v *validator) templateNodeAllowed(cp *field.Path, c *Cluster, h *Hypervisor, node, template string) {
	if node == "" || len(c.AllowedNodes) == 0 || slices.Contains(c.AllowedNodes, node) || h == nil || !v.hasNode(h, node) {
		return
	}
	v.add(cp.Child("allowedNodes"), "does not list %s, the node that holds %s: every machine is cloned from it onto that node (PVE clones onto another node only from shared storage); add %s to allowedNodes",
		node, template, node)
}

func (v *validator) image(name string) *Image { return v.images[name] }

func (v *validator) cidr(p *field.Path, s string) netip.Prefix {
	pfx, err := netip.ParsePrefix(s)
	if err != nil || !pfx.Addr().Is4() {
		v.add(p, "%q is not an IPv4 CIDR such as 10.244.0.0/16", s)
		return netip.Prefix{}
	}
	if pfx.Masked() != pfx {
		v.add(p, "%q has host bits set; write %s", s, pfx.Masked())
		return netip.Prefix{}
	}
	return pfx
}

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
		w := c.WorkerPools()[0].Size
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

// ipRange is an inclusive range of IPv4 addresses.
type ipRange struct{ first, last netip.Addr }

func (r ipRange) String() string { return r.first.String() + "-" + r.last.String() }

func (r ipRange) contains(a netip.Addr) bool {
	return r.first.Compare(a) <= 0 && a.Compare(r.last) <= 0
}

func (r ipRange) overlaps(o ipRange) bool {
	return r.first.Compare(o.last) <= 0 && o.first.Compare(r.last) <= 0
}

func (r ipRange) size() int {
	a, b := r.first.As4(), r.last.As4()
	return int(u32(b)-u32(a)) + 1
}

func u32(b [4]byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func broadcast(p netip.Prefix) netip.Addr {
	a := p.Addr().As4()
	n := u32(a) | (1<<(32-p.Bits()) - 1)
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

func (v *validator) ipRange(p *field.Path, s string) (ipRange, bool) {
	first, last, ok := strings.Cut(s, "-")
	if s == "" {
		v.add(p, "is required: first-last addresses for the nodes, e.g. 192.168.4.40-192.168.4.59")
		return ipRange{}, false
	}
	if !ok {
		v.add(p, "%q must be first-last, e.g. 192.168.4.40-192.168.4.59", s)
		return ipRange{}, false
	}
	a, okA := v.hostIP(p, strings.TrimSpace(first), true)
	b, okB := v.hostIP(p, strings.TrimSpace(last), true)
	if !okA || !okB {
		return ipRange{}, false
	}
	if b.Less(a) {
		v.add(p, "%q ends before it starts; write the lower address first", s)
		return ipRange{}, false
	}
	return ipRange{a, b}, true
}

var taintEffects = []string{"NoSchedule", "PreferNoSchedule", "NoExecute"}

// labelOK checks a label (or taint) key and value with Kubernetes' own
// rules, the ones the API server applies to a Node. (A hand-written regexp
// for the key, with its {0,251} repeat, cost every labctl start 2 ms to
// compile.)
func labelOK(key, value string) bool {
	return len(validation.IsQualifiedName(key)) == 0 && len(validation.IsValidLabelValue(value)) == 0
}

// workerLabels checks workers.labels (key=value) and workers.taints
// (key[=value]:Effect), which kubelet registers and the autoscaler's
// scale-from-zero annotations repeat.
func (v *validator) workerLabels(p *field.Path, w Workers) {
	for i, l := range w.Labels {
		k, val, ok := strings.Cut(l, "=")
		if !ok || !labelOK(k, val) {
			v.add(p.Child("labels").Index(i), "%q is not a node label key=value, e.g. labctl.dev/pool=workers", l)
		} else if strings.Contains(k, "kubernetes.io/") && !strings.HasPrefix(k, "node.kubernetes.io/") {
			v.add(p.Child("labels").Index(i), "%q: kubelet may not set labels under kubernetes.io except node.kubernetes.io/; use your own prefix", l)
		}
	}
	for i, t := range w.Taints {
		kv, effect, ok := strings.Cut(t, ":")
		k, val, _ := strings.Cut(kv, "=")
		if !ok || !labelOK(k, val) || !oneOf(effect, taintEffects) {
			v.add(p.Child("taints").Index(i), "%q is not a taint key[=value]:Effect with Effect one of %s, e.g. dedicated=batch:NoSchedule", t, strings.Join(taintEffects, ", "))
		}
	}
}

// autoscaler checks the cluster-autoscaler's scale-down profile.
func (v *validator) autoscaler(p *field.Path, a Autoscaler) {
	for _, d := range []struct{ name, val string }{
		{"scanInterval", a.ScanInterval}, {"scaleDownUnneededTime", a.ScaleDownUnneededTime},
		{"scaleDownDelayAfterAdd", a.ScaleDownDelayAfterAdd}, {"scaleDownDelayAfterDelete", a.ScaleDownDelayAfterDelete},
		{"maxNodeProvisionTime", a.MaxNodeProvisionTime},
	} {
		if dur, err := time.ParseDuration(d.val); err != nil || dur < 0 {
			v.add(p.Child(d.name), "%q is not a duration such as 1m or 10s", d.val)
		}
	}
	if f, err := strconv.ParseFloat(a.ScaleDownUtilizationThreshold, 64); err != nil || f <= 0 || f > 1 {
		v.add(p.Child("scaleDownUtilizationThreshold"), "%q must be a fraction above 0 and at most 1, e.g. 0.5", a.ScaleDownUtilizationThreshold)
	}
}
