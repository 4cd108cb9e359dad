package redact_test

import (
	"testing"

	"github.com/labctl/labctl/internal/redact"
)

// TestURL: what a user would see printed for each URL lab.yaml may hold.
func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		// The example: a Proxmox token id and secret as userinfo.
		"https://user%40pam%21labctl:SECRET@192.168.0.8:8006": "https://REDACTED@192.168.0.8:8006",
		"https://user@pam!labctl:SECRET@pve:8006/api2/json":   "https://REDACTED@pve:8006/api2/json",
		"https://ghp_SECRET@example.org/charts":               "https://REDACTED@example.org/charts",
		"https://a:b@c@host/x?y=1":                            "https://REDACTED@host/x?y=1",
		"http://mirror/x.img?token=SECRET&arch=amd64#frag":    "http://mirror/x.img?token=REDACTED&arch=amd64#frag",
		"https://s3/x.img?X-Amz-Signature=SECRET":             "https://s3/x.img?X-Amz-Signature=REDACTED",
		"qemu+ssh://admin@kvm1/system":                        "qemu+ssh://admin@kvm1/system",
		"qemu+ssh://admin:SECRET@kvm1/system":                 "qemu+ssh://admin:REDACTED@kvm1/system",
		"https://192.168.0.8:8006":                            "https://192.168.0.8:8006",
		"https://h/%zz@x":                                     "https://h/%zz@x", // '@' in the path is no userinfo
		"qemu:///system":                                      "qemu:///system",
		// libvirt's keyfile= and pkipath= are paths, sshauth= methods.
		"qemu+ssh://u@kvm1/system?keyfile=/home/u/.ssh/id_ed25519&sshauth=privkey": "qemu+ssh://u@kvm1/system?keyfile=/home/u/.ssh/id_ed25519&sshauth=privkey",
		"qemu+tls://kvm2/system?pkipath=/etc/pki/labctl":                           "qemu+tls://kvm2/system?pkipath=/etc/pki/labctl",
		"https://mirror/x?keyfile=SECRET":                                          "https://mirror/x?keyfile=REDACTED",
		"not a url":                                                                "not a url",
		"":                                                                         "",
	} {
		if got := redact.URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestText redacts every URL inside a message, and nothing else.
func TestText(t *testing.T) {
	in := `Get "https://root:SECRET@pve:8006/api2/json/version": dial tcp: refused; see https://pve.proxmox.com/wiki`
	want := `Get "https://REDACTED@pve:8006/api2/json/version": dial tcp: refused; see https://pve.proxmox.com/wiki`
	if got := redact.Text(in); got != want {
		t.Errorf("Text = %q, want %q", got, want)
	}
}
