package config

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/labctl/labctl/internal/redact"
)

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

// test+tls is the test beds' daemon over TLS on loopback, reached as a
// remote host is (libvirttest): the box's libvirt provider and mgmt down
// reach it as they reach a qemu+tls host.
func testScheme(s string) bool { return s == "test" || s == "storage" || s == "test+tls" }

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

// WhyNoClustersOn says why workload cluster machines cannot run on hypervisor
// h, or "" when they can: the one rule for clusters and their pools.
// Proxmox hypervisors take them through CAPMOX; libvirt hosts through
// labctl's own libvirt provider, which runs in the management cluster and
// so reaches a host over the network only.
func WhyNoClustersOn(h *Hypervisor) string {
	if h.Libvirt == nil || h.Proxmox != nil {
		return ""
	}
	if u, err := url.Parse(h.Libvirt.URI); err != nil || (u.Scheme != "qemu+ssh" && u.Scheme != "qemu+tls" && u.Scheme != "test+tls") {
		return fmt.Sprintf("%s is reached at %q, but cluster machines on libvirt hosts are made by labctl's libvirt provider in the management cluster, which reaches a host over qemu+ssh:// or qemu+tls:// only; give hypervisors[%s].libvirt.uri the host's remote URI, e.g. qemu+ssh://root@kvm1.lan/system", h.Name, redact.URL(h.Libvirt.URI), h.Name)
	}
	return ""
}
