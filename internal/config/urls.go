package config

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/labctl/labctl/internal/redact"
)

// urlField is one URL-valued field of lab.yaml.
type urlField struct {
	path *field.Path
	val  *string
	fix  string // what to write instead of credentials in it
}

// urlFields lists every URL field of lab, in file order. Validation
// refuses credentials in each, and Redacted hides them in each: a new URL
// field is added here, once.
func urlFields(lab *Lab) []urlField {
	const anonymous = "labctl fetches it without credentials, so use a URL that needs none"
	var out []urlField
	for i := range lab.Hypervisors {
		h := &lab.Hypervisors[i]
		hp := field.NewPath("hypervisors").Index(i)
		if h.Proxmox != nil {
			out = append(out, urlField{hp.Child("proxmox", "url"), &h.Proxmox.URL,
				"write only the address, e.g. https://192.168.0.8:8006, the token id in tokenID (user@realm!tokenname), and the secret in a reference: tokenSecret: {env: PVE_TOKEN_SECRET} or {file: ~/.config/labctl/pve-token}"})
		}
		if h.Libvirt != nil {
			out = append(out, urlField{hp.Child("libvirt", "uri"), &h.Libvirt.URI,
				"drop the password: labctl logs in with your SSH key (ssh-agent or ~/.ssh), e.g. qemu+ssh://user@host/system"})
		}
	}
	mp := field.NewPath("management")
	m := &lab.Management
	st := &m.Stack
	sp := mp.Child("stack")
	out = append(out,
		urlField{mp.Child("image", "url"), &m.Image.URL, anonymous},
		urlField{mp.Child("image", "checksumURL"), &m.Image.ChecksumURL, anonymous},
		urlField{sp.Child("chartRepos", "certManager"), &st.ChartRepos.CertManager, anonymous},
		urlField{sp.Child("chartRepos", "clusterAPIOperator"), &st.ChartRepos.ClusterAPIOperator, anonymous},
		urlField{sp.Child("chartRepos", "cilium"), &st.ChartRepos.Cilium, anonymous},
		urlField{sp.Child("kamaji", "fetchURL"), &st.Kamaji.FetchURL, anonymous + ", e.g. https://github.com/OWNER/REPO/releases"},
	)
	return out
}

// urls refuses credentials in every URL field: a token in a URL would be
// printed by config view, doctor and dry runs, and sent in logs.
func (v *validator) urls() {
	for _, f := range urlFields(v.lab) {
		if s := *f.val; redact.URL(s) != s {
			v.add(f.path, "%q holds credentials (shown here as %s); lab.yaml never holds a secret: %s", redact.URL(s), redact.Placeholder, f.fix)
		}
	}
}

// Redacted returns a copy of lab for printing, with every URL field passed
// through redact.URL. A valid lab holds no credentials in URLs, so for it
// the copy prints the same; it matters for labs built in Go.
func Redacted(lab *Lab) *Lab {
	c := *lab
	c.Hypervisors = make([]Hypervisor, len(lab.Hypervisors))
	for i, h := range lab.Hypervisors {
		if h.Proxmox != nil {
			px := *h.Proxmox
			h.Proxmox = &px
		}
		if h.Libvirt != nil {
			lv := *h.Libvirt
			h.Libvirt = &lv
		}
		c.Hypervisors[i] = h
	}
	for _, f := range urlFields(&c) {
		*f.val = redact.URL(*f.val)
	}
	return &c
}
