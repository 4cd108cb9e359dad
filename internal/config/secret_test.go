package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func pve(ref SecretRef) *Hypervisor {
	return &Hypervisor{Name: "pve", Proxmox: &Proxmox{TokenID: "root@pam!labctl", TokenSecret: ref}}
}

func TestReadTokenSecret(t *testing.T) {
	const secret = "0b3c1e2a-5d4f-4e6a-9b8c-7d6e5f4a3b2c"
	t.Setenv("LABCTL_TEST_SECRET", "  "+secret+"\n")
	if v, err := pve(SecretRef{Env: "LABCTL_TEST_SECRET"}).ReadTokenSecret(); err != nil || v != secret {
		t.Errorf("env: %q, %v", v, err)
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	if err := os.WriteFile(filepath.Join(home, "pve-token"), []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v, err := pve(SecretRef{File: "~/pve-token"}).ReadTokenSecret(); err != nil || v != secret {
		t.Errorf("~ file: %q, %v", v, err)
	}
	found, warning, err := pve(SecretRef{File: "~/pve-token"}).CheckTokenSecret()
	if err != nil || warning != "" || found != "file "+filepath.Join(home, "pve-token")+" (mode 0600)" {
		t.Errorf("check: %q %q %v", found, warning, err)
	}
	if err := os.Chmod(filepath.Join(home, "pve-token"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, warning, _ := pve(SecretRef{File: "~/pve-token"}).CheckTokenSecret(); !strings.Contains(warning, "mode 0644, wider than 0600: chmod 600 ") {
		t.Errorf("0644 warning: %q", warning)
	}
}

// Every command reads the secret here, so each refusal names the field,
// the variable or file, and the fix, and never the value. The folder and
// the oversized file were read as secrets (or failed with a bare "is a
// directory") by the Proxmox driver and image build before.
func TestReadTokenSecretRefuses(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte(strings.Repeat("s", 65<<10)), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LABCTL_BLANK", " ")
	t.Setenv("LABCTL_UNSET", "")
	os.Unsetenv("LABCTL_UNSET")
	for _, c := range []struct {
		name string
		h    *Hypervisor
		want string
	}{
		{"unset", pve(SecretRef{Env: "LABCTL_UNSET"}), "hypervisors[pve].proxmox.tokenSecret.env: LABCTL_UNSET is not set: export LABCTL_UNSET=<the secret of token root@pam!labctl>"},
		{"blank", pve(SecretRef{Env: "LABCTL_BLANK"}), "hypervisors[pve].proxmox.tokenSecret.env: LABCTL_BLANK is set but empty"},
		{"missing", pve(SecretRef{File: filepath.Join(dir, "nope")}), "hypervisors[pve].proxmox.tokenSecret.file: " + filepath.Join(dir, "nope") + " does not exist: write the secret of token root@pam!labctl there and chmod 600 it"},
		{"folder", pve(SecretRef{File: dir}), "tokenSecret.file: " + dir + " is a folder, not a file holding the secret of token"},
		{"big", pve(SecretRef{File: big}), "tokenSecret.file: " + big + " is larger than 64 KiB"},
		{"empty", pve(SecretRef{File: empty}), "tokenSecret.file: " + empty + " is empty"},
		{"none", pve(SecretRef{}), "hypervisors[pve].proxmox.tokenSecret: name an env variable or a file"},
		{"libvirt", &Hypervisor{Name: "kvm", Libvirt: &Libvirt{}}, "hypervisors[kvm] is not a Proxmox hypervisor"},
	} {
		if _, err := c.h.ReadTokenSecret(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.name, err, c.want)
		}
		if _, _, err := c.h.CheckTokenSecret(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: doctor's check says %v; want %q", c.name, err, c.want)
		}
	}
}
