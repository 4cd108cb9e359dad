// Package cloudinit renders NoCloud data for labctl's VMs: user-data (user,
// SSH keys, k3s, extra files), meta-data, network-config v2 with a static
// address, and the seed ISO (volume label cidata) that carries them. It
// knows no hypervisor: libvirt uploads the ISO as a volume, Proxmox as iso
// content.
package cloudinit

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"path"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/labctl/labctl/internal/sshkey"
	"go.yaml.in/yaml/v3"
)

// Config is what one VM's cloud-init does on first boot.
type Config struct {
	// Hostname is the VM's host name, a DNS label.
	Hostname string
	// User is the login user, made with passwordless sudo and SSHKeys.
	User    string
	SSHKeys []string
	// HostKey, when set, is the VM's SSH host key, made by labctl and
	// handed over through cloud-init's ssh_keys, so labctl knows the key
	// before the first connection and never trusts one on first use.
	HostKey *HostKey
	// Files are written before any command runs (cloud-init write_files).
	Files []File
	// K3s installs a k3s server when set.
	K3s *K3s
	// RunCmd are extra commands run last, each as an argv list.
	RunCmd [][]string
	// FinalMessage is printed on the console when cloud-init is done.
	FinalMessage string
}

// File is one file cloud-init writes.
type File struct {
	Path    string // absolute
	Content []byte
	// Permissions as octal text, e.g. 0600; default 0644.
	Permissions string
}

// HostKey is an ed25519 SSH host key pair in OpenSSH formats.
type HostKey struct {
	// Private is the OpenSSH PEM ("-----BEGIN OPENSSH PRIVATE KEY-----").
	Private []byte
	// Public is the authorized_keys line, "ssh-ed25519 AAAA...".
	Public string
}

// K3s is the k3s server of the management VM.
type K3s struct {
	// Version is a k3s release such as v1.35.4+k3s1; the install script
	// comes from the same tag, so nothing floats.
	Version string
	// TLSSANs are extra names in the API server certificate: the VM's IP.
	TLSSANs []string
	// Manifests land in k3s's auto-deploy folder, by file name.
	Manifests []File
}

// K3sConfigPath is where k3s reads its server options.
const K3sConfigPath = "/etc/rancher/k3s/config.yaml"

// K3sKubeconfigPath is the admin kubeconfig k3s writes (server 127.0.0.1).
const K3sKubeconfigPath = "/etc/rancher/k3s/k3s.yaml"

// K3sManifestsDir is k3s's auto-deploy folder.
const K3sManifestsDir = "/var/lib/rancher/k3s/server/manifests"

var (
	dnsLabel     = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	k3sVersionRe = regexp.MustCompile(`^v1\.\d+\.\d+\+k3s\d+$`)
	manifestRe   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*\.ya?ml$`)
	permRe       = regexp.MustCompile(`^0[0-7]{3}$`)
)

// userData is the #cloud-config document; field order is output order.
type userData struct {
	Hostname        string      `yaml:"hostname"`
	ManageEtcHosts  bool        `yaml:"manage_etc_hosts"`
	Users           []any       `yaml:"users"`
	SSHPasswordAuth bool        `yaml:"ssh_pwauth"`
	DisableRoot     bool        `yaml:"disable_root"`
	SSHKeys         *sshKeys    `yaml:"ssh_keys,omitempty"`
	SSHDeleteKeys   *bool       `yaml:"ssh_deletekeys,omitempty"`
	WriteFiles      []writeFile `yaml:"write_files,omitempty"`
	RunCmd          [][]string  `yaml:"runcmd,omitempty"`
	FinalMessage    string      `yaml:"final_message,omitempty"`
}

type user struct {
	Name              string   `yaml:"name"`
	Sudo              string   `yaml:"sudo"`
	Shell             string   `yaml:"shell"`
	LockPasswd        bool     `yaml:"lock_passwd"`
	SSHAuthorizedKeys []string `yaml:"ssh_authorized_keys"`
}

// sshKeys is cloud-init's cc_ssh ssh_keys: with it, cloud-init writes
// these host keys and generates none (cloudinit/config/cc_ssh.py).
type sshKeys struct {
	ED25519Private string `yaml:"ed25519_private"`
	ED25519Public  string `yaml:"ed25519_public"`
}

type writeFile struct {
	Path        string `yaml:"path"`
	Encoding    string `yaml:"encoding,omitempty"`
	Content     string `yaml:"content"`
	Permissions string `yaml:"permissions"`
	Owner       string `yaml:"owner"`
}

// k3sConfig is /etc/rancher/k3s/config.yaml.
type k3sConfig struct {
	WriteKubeconfigMode string   `yaml:"write-kubeconfig-mode"`
	TLSSAN              []string `yaml:"tls-san,omitempty"`
	Disable             []string `yaml:"disable"`
}

// UserData renders the #cloud-config document.
func UserData(c Config) ([]byte, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	ud := userData{
		Hostname:       c.Hostname,
		ManageEtcHosts: true,
		Users: []any{"default", user{
			Name: c.User, Sudo: "ALL=(ALL) NOPASSWD:ALL", Shell: "/bin/bash",
			LockPasswd: true, SSHAuthorizedKeys: c.SSHKeys,
		}},
		FinalMessage: c.FinalMessage,
	}
	if k := c.HostKey; k != nil {
		del := true // drop whatever host keys the image came with
		ud.SSHKeys = &sshKeys{ED25519Private: string(k.Private), ED25519Public: k.Public}
		ud.SSHDeleteKeys = &del
	}
	for _, f := range c.Files {
		ud.WriteFiles = append(ud.WriteFiles, toWriteFile(f))
	}
	if k := c.K3s; k != nil {
		cfg, err := yaml.Marshal(k3sConfig{WriteKubeconfigMode: "0600", TLSSAN: k.TLSSANs, Disable: []string{"traefik"}})
		if err != nil {
			return nil, fmt.Errorf("rendering %s: %w", K3sConfigPath, err)
		}
		ud.WriteFiles = append(ud.WriteFiles, toWriteFile(File{Path: K3sConfigPath, Content: cfg, Permissions: "0600"}))
		for _, m := range k.Manifests {
			m.Path = path.Join(K3sManifestsDir, m.Path)
			ud.WriteFiles = append(ud.WriteFiles, toWriteFile(m))
		}
		ud.RunCmd = append(ud.RunCmd, []string{"sh", "-c", k3sInstall(k.Version)})
	}
	ud.RunCmd = append(ud.RunCmd, c.RunCmd...)
	body, err := yaml.Marshal(ud)
	if err != nil {
		return nil, fmt.Errorf("rendering user-data: %w", err)
	}
	return append([]byte("#cloud-config\n"), body...), nil
}

// K3sInstallScriptURL is k3s's install script at the given release tag.
func K3sInstallScriptURL(version string) string {
	return "https://raw.githubusercontent.com/k3s-io/k3s/" + strings.ReplaceAll(version, "+", "%2B") + "/install.sh"
}

// k3sInstall runs the install script of the pinned tag; the script checks
// the k3s binary against the release's sha256sum file. version is checked
// against k3sVersionRe first, so it is safe in a shell word.
func k3sInstall(version string) string {
	return fmt.Sprintf("curl -sfL --retry 5 %s | INSTALL_K3S_VERSION='%s' sh -s - server", K3sInstallScriptURL(version), version)
}

// K3sUpgradeCommand is the same install script at another tag, which is
// how k3s upgrades a server in place ("Manual Upgrades" in k3s's docs):
// it replaces the binary and restarts the service, keeping
// /etc/rancher/k3s/config.yaml, the datastore and the certificates, so a
// kubeconfig made before still works.
func K3sUpgradeCommand(version string) (string, error) {
	if !k3sVersionRe.MatchString(version) {
		return "", fmt.Errorf("k3s version %q is not a release such as v1.35.4+k3s1", version)
	}
	return k3sInstall(version), nil
}

func toWriteFile(f File) writeFile {
	perm := f.Permissions
	if perm == "" {
		perm = "0644"
	}
	wf := writeFile{Path: f.Path, Permissions: perm, Owner: "root:root"}
	if isPlainText(f.Content) {
		wf.Content = string(f.Content)
	} else {
		wf.Encoding = "b64"
		wf.Content = base64.StdEncoding.EncodeToString(f.Content)
	}
	return wf
}

func (c Config) validate() error {
	var errs []error
	if !dnsLabel.MatchString(c.Hostname) {
		errs = append(errs, fmt.Errorf("hostname %q is not a DNS label (lowercase letters, digits, '-')", c.Hostname))
	}
	if !dnsLabel.MatchString(c.User) {
		errs = append(errs, fmt.Errorf("user %q is not a valid user name", c.User))
	}
	if len(c.SSHKeys) == 0 {
		errs = append(errs, errors.New("no SSH public key: nobody could log in to the VM"))
	}
	for i, k := range c.SSHKeys {
		if err := sshkey.CheckPublic(k); err != nil {
			errs = append(errs, fmt.Errorf("SSH key %d %w", i+1, err))
		}
	}
	if k := c.HostKey; k != nil {
		if !bytes.HasPrefix(k.Private, []byte("-----BEGIN OPENSSH PRIVATE KEY-----")) {
			errs = append(errs, errors.New("SSH host key: the private key is not in OpenSSH PEM form"))
		}
		if f := strings.Fields(k.Public); len(f) < 2 || f[0] != "ssh-ed25519" || strings.ContainsAny(k.Public, "\r\n") {
			errs = append(errs, errors.New("SSH host key: the public key is not one 'ssh-ed25519 AAAA...' line"))
		}
	}
	for _, f := range c.Files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path {
			errs = append(errs, fmt.Errorf("file path %q must be absolute and clean", f.Path))
		}
		if f.Permissions != "" && !permRe.MatchString(f.Permissions) {
			errs = append(errs, fmt.Errorf("file %s: permissions %q must be octal such as 0644", f.Path, f.Permissions))
		}
	}
	if k := c.K3s; k != nil {
		if !k3sVersionRe.MatchString(k.Version) {
			errs = append(errs, fmt.Errorf("k3s version %q is not a release such as v1.35.4+k3s1", k.Version))
		}
		for _, m := range k.Manifests {
			if !manifestRe.MatchString(m.Path) {
				errs = append(errs, fmt.Errorf("k3s manifest %q must be a plain file name ending in .yaml", m.Path))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("cloud-init config: %w", errors.Join(errs...))
	}
	return nil
}

// MetaData renders NoCloud meta-data. instanceID changes make cloud-init
// run again on the next boot, so it is derived from the VM and its data.
func MetaData(instanceID, hostname string) ([]byte, error) {
	return MetaDataWithProviderID(instanceID, hostname, "")
}

// MetaDataWithProviderID is MetaData with a provider-id key as well (left
// out when empty): the Node's spec.providerID, which a kubelet's
// --provider-id reads through cloud-init's jinja as
// {{ ds.meta_data.provider_id }} (cloud-init offers each meta-data key
// with '-' as '_' too), so that Cluster API can match the Node to its
// Machine.
func MetaDataWithProviderID(instanceID, hostname, providerID string) ([]byte, error) {
	if instanceID == "" || !dnsLabel.MatchString(hostname) {
		return nil, fmt.Errorf("meta-data needs an instance id and a DNS-label hostname, got %q and %q", instanceID, hostname)
	}
	return yaml.Marshal(struct {
		InstanceID    string `yaml:"instance-id"`
		LocalHostname string `yaml:"local-hostname"`
		ProviderID    string `yaml:"provider-id,omitempty"`
	}{instanceID, hostname, providerID})
}

// InstanceID names one VM's cloud-init data: its name and a digest of the
// documents, so new data is applied as a new instance.
func InstanceID(name string, docs ...[]byte) string {
	h := sha256.New()
	for _, d := range docs {
		h.Write(d)
		h.Write([]byte{0})
	}
	return name + "-" + hex.EncodeToString(h.Sum(nil))[:12]
}

// Static is a fixed IPv4 setup for the VM's first NIC, matched by MAC.
type Static struct {
	MAC     string // aa:bb:cc:dd:ee:ff
	Address netip.Prefix
	Gateway netip.Addr
	DNS     []netip.Addr
	// Interface is the name the NIC gets (set-name); default eth0.
	Interface string
}

type netConfig struct {
	Version   int                 `yaml:"version"`
	Ethernets map[string]ethernet `yaml:"ethernets"`
}

type ethernet struct {
	Match       map[string]string `yaml:"match"`
	SetName     string            `yaml:"set-name"`
	DHCP4       bool              `yaml:"dhcp4"`
	Addresses   []string          `yaml:"addresses,omitempty"`
	Routes      []route           `yaml:"routes,omitempty"`
	Nameservers *nameservers      `yaml:"nameservers,omitempty"`
}

type route struct {
	To  string `yaml:"to"`
	Via string `yaml:"via"`
}

type nameservers struct {
	Addresses []string `yaml:"addresses"`
}

var macRe = regexp.MustCompile(`^[0-9a-f]{2}(:[0-9a-f]{2}){5}$`)

// NetworkConfig renders network-config version 2 for a static address.
func NetworkConfig(s Static) ([]byte, error) {
	var errs []error
	if !macRe.MatchString(s.MAC) {
		errs = append(errs, fmt.Errorf("MAC %q is not lowercase aa:bb:cc:dd:ee:ff", s.MAC))
	}
	if !s.Address.IsValid() || !s.Address.Addr().Is4() {
		errs = append(errs, fmt.Errorf("address %v is not an IPv4 prefix such as 10.213.0.10/24", s.Address))
	}
	if s.Gateway.IsValid() && s.Address.IsValid() && !s.Address.Masked().Contains(s.Gateway) {
		errs = append(errs, fmt.Errorf("gateway %s is outside %s", s.Gateway, s.Address.Masked()))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("network-config: %w", errors.Join(errs...))
	}
	name := s.Interface
	if name == "" {
		name = "eth0"
	}
	eth := ethernet{
		Match:     map[string]string{"macaddress": s.MAC},
		SetName:   name,
		Addresses: []string{s.Address.String()},
	}
	if s.Gateway.IsValid() {
		eth.Routes = []route{{To: "0.0.0.0/0", Via: s.Gateway.String()}}
	}
	if len(s.DNS) > 0 {
		eth.Nameservers = &nameservers{}
		for _, d := range s.DNS {
			eth.Nameservers.Addresses = append(eth.Nameservers.Addresses, d.String())
		}
	}
	return yaml.Marshal(netConfig{Version: 2, Ethernets: map[string]ethernet{name: eth}})
}

// isPlainText reports whether b can go into YAML as a literal string.
func isPlainText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	return !bytes.ContainsAny(b, "\x00\r")
}
