package cloudinit

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/netip"
	"strings"
	"testing"

	"github.com/kdomanski/iso9660"
	"go.yaml.in/yaml/v3"
)

const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOk0Yk4ZxS3oKZgqk0b7Qn1bqS8N0d6lqN9k6dW4uD0m test@example"

func mgmtConfig() Config {
	return Config{
		Hostname: "labctl-mgmt",
		User:     "ubuntu",
		SSHKeys:  []string{key},
		Files:    []File{{Path: "/etc/labctl/blob", Content: []byte{0, 1, 2, 0xff}, Permissions: "0600"}},
		K3s: &K3s{
			Version:   "v1.35.4+k3s1",
			TLSSANs:   []string{"10.213.0.10"},
			Manifests: []File{{Path: "cert-manager.yaml", Content: []byte("apiVersion: helm.cattle.io/v1\nkind: HelmChart\n")}},
		},
	}
}

func decodeUserData(t *testing.T, b []byte) map[string]any {
	t.Helper()
	if !bytes.HasPrefix(b, []byte("#cloud-config\n")) {
		t.Fatalf("user-data does not start with #cloud-config:\n%s", b)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatalf("user-data is not YAML: %v\n%s", err, b)
	}
	return m
}

func writeFiles(t *testing.T, ud map[string]any) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, f := range ud["write_files"].([]any) {
		m := f.(map[string]any)
		out[m["path"].(string)] = m
	}
	return out
}

func TestUserDataK3sServer(t *testing.T) {
	b, err := UserData(mgmtConfig())
	if err != nil {
		t.Fatal(err)
	}
	ud := decodeUserData(t, b)
	if ud["hostname"] != "labctl-mgmt" || ud["ssh_pwauth"] != false {
		t.Errorf("hostname/ssh_pwauth wrong: %v %v", ud["hostname"], ud["ssh_pwauth"])
	}
	users := ud["users"].([]any)
	u := users[1].(map[string]any)
	if u["name"] != "ubuntu" || u["ssh_authorized_keys"].([]any)[0] != key || u["lock_passwd"] != true {
		t.Errorf("user entry wrong: %v", u)
	}

	files := writeFiles(t, ud)
	cfgFile, ok := files[K3sConfigPath]
	if !ok {
		t.Fatalf("no %s in write_files: %v", K3sConfigPath, files)
	}
	var k3s map[string]any
	if err := yaml.Unmarshal([]byte(cfgFile["content"].(string)), &k3s); err != nil {
		t.Fatal(err)
	}
	if d := k3s["disable"].([]any); len(d) != 1 || d[0] != "traefik" {
		t.Errorf("k3s disable = %v, want [traefik]", d)
	}
	if s := k3s["tls-san"].([]any); len(s) != 1 || s[0] != "10.213.0.10" {
		t.Errorf("k3s tls-san = %v, want [10.213.0.10]", s)
	}
	if cfgFile["permissions"] != "0600" {
		t.Errorf("k3s config permissions %v", cfgFile["permissions"])
	}
	if _, ok := files["/var/lib/rancher/k3s/server/manifests/cert-manager.yaml"]; !ok {
		t.Errorf("manifest not placed in the auto-deploy folder: %v", files)
	}
	blob := files["/etc/labctl/blob"]
	if blob["encoding"] != "b64" {
		t.Fatalf("binary file not base64: %v", blob)
	}
	if got, _ := base64.StdEncoding.DecodeString(blob["content"].(string)); !bytes.Equal(got, []byte{0, 1, 2, 0xff}) {
		t.Errorf("binary content round trip: %v", got)
	}

	run := ud["runcmd"].([]any)
	cmd := strings.Join(toStrings(run[0].([]any)), " ")
	for _, want := range []string{"k3s-io/k3s/v1.35.4%2Bk3s1/install.sh", "INSTALL_K3S_VERSION='v1.35.4+k3s1'"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("k3s install command %q lacks %q", cmd, want)
		}
	}
}

func toStrings(a []any) []string {
	var s []string
	for _, x := range a {
		s = append(s, x.(string))
	}
	return s
}

func TestUserDataWithoutK3s(t *testing.T) {
	c := Config{Hostname: "vm1", User: "tester", SSHKeys: []string{key}, RunCmd: [][]string{{"touch", "/x"}}, FinalMessage: "done $UPTIME"}
	b, err := UserData(c)
	if err != nil {
		t.Fatal(err)
	}
	ud := decodeUserData(t, b)
	if _, ok := ud["write_files"]; ok {
		t.Errorf("write_files present without files")
	}
	if run := ud["runcmd"].([]any); len(run) != 1 {
		t.Errorf("runcmd = %v", run)
	}
	if strings.Contains(string(b), "k3s") {
		t.Errorf("k3s appears without K3s set:\n%s", b)
	}
}

func TestUserDataRejects(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"bad hostname":   func(c *Config) { c.Hostname = "Bad_Host" },
		"no keys":        func(c *Config) { c.SSHKeys = nil },
		"two-line key":   func(c *Config) { c.SSHKeys = []string{"ssh-ed25519 AAAA\nx"} },
		"k3s version":    func(c *Config) { c.K3s.Version = "latest; rm -rf /" },
		"relative file":  func(c *Config) { c.Files = []File{{Path: "etc/x"}} },
		"bad perms":      func(c *Config) { c.Files = []File{{Path: "/etc/x", Permissions: "rw"}} },
		"manifest path":  func(c *Config) { c.K3s.Manifests = []File{{Path: "../../etc/passwd"}} },
		"manifest name":  func(c *Config) { c.K3s.Manifests = []File{{Path: "x.json"}} },
		"bad user":       func(c *Config) { c.User = "Root User" },
		"unclean path":   func(c *Config) { c.Files = []File{{Path: "/etc/../x"}} },
		"empty hostname": func(c *Config) { c.Hostname = "" },
	} {
		t.Run(name, func(t *testing.T) {
			c := mgmtConfig()
			mod(&c)
			if _, err := UserData(c); err == nil {
				t.Errorf("UserData accepted %s", name)
			}
		})
	}
}

func TestNetworkConfigStatic(t *testing.T) {
	b, err := NetworkConfig(Static{
		MAC:     "52:54:00:12:34:56",
		Address: netip.MustParsePrefix("10.213.0.10/24"),
		Gateway: netip.MustParseAddr("10.213.0.1"),
		DNS:     []netip.Addr{netip.MustParseAddr("10.213.0.1")},
	})
	if err != nil {
		t.Fatal(err)
	}
	var nc struct {
		Version   int
		Ethernets map[string]struct {
			Match     map[string]string
			SetName   string `yaml:"set-name"`
			DHCP4     bool
			Addresses []string
			Routes    []struct{ To, Via string }
			Nameserv  struct{ Addresses []string } `yaml:"nameservers"`
		}
	}
	if err := yaml.Unmarshal(b, &nc); err != nil {
		t.Fatal(err)
	}
	eth, ok := nc.Ethernets["eth0"]
	if nc.Version != 2 || !ok {
		t.Fatalf("not a v2 config with eth0:\n%s", b)
	}
	if eth.Match["macaddress"] != "52:54:00:12:34:56" || eth.SetName != "eth0" || eth.DHCP4 {
		t.Errorf("match/set-name/dhcp wrong: %+v", eth)
	}
	if len(eth.Addresses) != 1 || eth.Addresses[0] != "10.213.0.10/24" {
		t.Errorf("addresses = %v", eth.Addresses)
	}
	if len(eth.Routes) != 1 || eth.Routes[0].Via != "10.213.0.1" || eth.Routes[0].To != "0.0.0.0/0" {
		t.Errorf("routes = %v", eth.Routes)
	}
	if len(eth.Nameserv.Addresses) != 1 {
		t.Errorf("nameservers = %v", eth.Nameserv)
	}
}

func TestNetworkConfigRejects(t *testing.T) {
	ok := Static{MAC: "52:54:00:12:34:56", Address: netip.MustParsePrefix("10.213.0.10/24"), Gateway: netip.MustParseAddr("10.213.0.1")}
	for name, mod := range map[string]func(*Static){
		"upper MAC":       func(s *Static) { s.MAC = "52:54:00:AB:34:56" },
		"short MAC":       func(s *Static) { s.MAC = "52:54:00:12:34" },
		"no address":      func(s *Static) { s.Address = netip.Prefix{} },
		"IPv6":            func(s *Static) { s.Address = netip.MustParsePrefix("fd00::10/64") },
		"gateway outside": func(s *Static) { s.Gateway = netip.MustParseAddr("10.9.0.1") },
	} {
		s := ok
		mod(&s)
		if _, err := NetworkConfig(s); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestMetaData(t *testing.T) {
	b, err := MetaData("vm1-abc", "vm1")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]string
	if err := yaml.Unmarshal(b, &m); err != nil || m["instance-id"] != "vm1-abc" || m["local-hostname"] != "vm1" {
		t.Fatalf("meta-data %q: %v", b, err)
	}
	if _, err := MetaData("", "vm1"); err == nil {
		t.Error("empty instance id accepted")
	}
	if a, b := InstanceID("vm1", []byte("x")), InstanceID("vm1", []byte("y")); a == b || !strings.HasPrefix(a, "vm1-") {
		t.Errorf("instance ids %q %q: must differ with the data and start with the name", a, b)
	}
}

// TestSeedISOReadsBack builds the seed ISO and reads it with an ISO9660
// reader: label cidata and the three NoCloud files under their exact names.
func TestSeedISOReadsBack(t *testing.T) {
	ud, err := UserData(mgmtConfig())
	if err != nil {
		t.Fatal(err)
	}
	md, _ := MetaData("labctl-mgmt-1", "labctl-mgmt")
	nc := []byte("version: 2\n")
	iso, err := SeedISO(Seed{UserData: ud, MetaData: md, NetworkConfig: nc})
	if err != nil {
		t.Fatal(err)
	}
	img, err := iso9660.OpenImage(bytes.NewReader(iso))
	if err != nil {
		t.Fatal(err)
	}
	label, err := img.Label()
	if err != nil || label != VolumeLabel {
		t.Fatalf("label %q (%v), want %q", label, err, VolumeLabel)
	}
	root, err := img.RootDir()
	if err != nil {
		t.Fatal(err)
	}
	children, err := root.GetChildren()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]byte{}
	for _, c := range children {
		data, err := io.ReadAll(c.Reader())
		if err != nil {
			t.Fatal(err)
		}
		got[c.Name()] = data
	}
	want := map[string][]byte{"user-data": ud, "meta-data": md, "network-config": nc}
	for name, data := range want {
		if !bytes.Equal(got[name], data) {
			t.Errorf("%s on the ISO differs (have files %v)", name, keys(got))
		}
	}
	if len(got) != 3 {
		t.Errorf("ISO holds %v, want exactly user-data, meta-data, network-config", keys(got))
	}

	if _, err := SeedISO(Seed{MetaData: md}); err == nil {
		t.Error("seed without user-data accepted")
	}
}

func keys(m map[string][]byte) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	return k
}

// TestUserDataHostKey: the host key goes into cc_ssh's ssh_keys under the
// names cloud-init reads (ed25519_private, ed25519_public), with
// ssh_deletekeys so the image's own keys go; a malformed key is refused.
func TestUserDataHostKey(t *testing.T) {
	c := mgmtConfig()
	priv := "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"
	c.HostKey = &HostKey{Private: []byte(priv), Public: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHost labctl host key"}
	ud, err := UserData(c)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		SSHKeys       map[string]string `yaml:"ssh_keys"`
		SSHDeleteKeys bool              `yaml:"ssh_deletekeys"`
	}
	if err := yaml.Unmarshal(ud, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SSHKeys["ed25519_private"] != priv || doc.SSHKeys["ed25519_public"] != c.HostKey.Public || !doc.SSHDeleteKeys || len(doc.SSHKeys) != 2 {
		t.Errorf("ssh_keys %v, ssh_deletekeys %v", doc.SSHKeys, doc.SSHDeleteKeys)
	}
	if plain, _ := UserData(mgmtConfig()); strings.Contains(string(plain), "ssh_keys") {
		t.Error("ssh_keys rendered without a host key")
	}
	c.HostKey = &HostKey{Private: []byte("not a key"), Public: "ssh-rsa AAAA x"}
	if _, err := UserData(c); err == nil || !strings.Contains(err.Error(), "OpenSSH PEM") || !strings.Contains(err.Error(), "ssh-ed25519") {
		t.Errorf("malformed host key: %v", err)
	}
}
