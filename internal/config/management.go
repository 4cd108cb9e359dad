package config

import (
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/labctl/labctl/internal/redact"
	"github.com/labctl/labctl/internal/sshkey"
)

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
