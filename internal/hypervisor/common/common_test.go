package common

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kdomanski/iso9660"

	"github.com/labctl/labctl/internal/hypervisor"
)

const sum = "3b0c9e3e4e1f7a9d2c5b8a6f0e1d2c3b4a5f6e7d8c9b0a1f2e3d4c5b6a7f8e9d"

// sums serves a SHA256SUMS file on loopback, as cloud-images.ubuntu.com
// writes it (sha256sum's binary mode: "<hex> *<name>").
func sums(t *testing.T, body string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/SHA256SUMS" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestChecksumFromSpecOrSums(t *testing.T) {
	ctx := context.Background()
	srv := sums(t, "0000000000000000000000000000000000000000000000000000000000000000 *jammy.img\n"+strings.ToUpper(sum)+" *noble-server-cloudimg-amd64.img\n")
	got, err := Checksum(ctx, srv.Client(), hypervisor.ImageSpec{URL: "https://x/noble-server-cloudimg-amd64.img", Checksum: "sha256:" + sum})
	if err != nil || got != sum {
		t.Errorf("inline: %q, %v", got, err)
	}
	// The name is the URL's path, without the query: the Proxmox driver
	// looked for "noble-server-cloudimg-amd64.img?v=2" before.
	got, err = Checksum(ctx, srv.Client(), hypervisor.ImageSpec{URL: "https://x/noble-server-cloudimg-amd64.img?v=2", ChecksumURL: srv.URL + "/SHA256SUMS"})
	if err != nil || got != sum {
		t.Errorf("from SHA256SUMS: %q, %v; want the lowercase sum", got, err)
	}
}

func TestChecksumRefuses(t *testing.T) {
	ctx := context.Background()
	srv := sums(t, sum+"  other.img\n")
	for name, c := range map[string]struct {
		spec hypervisor.ImageSpec
		want string
	}{
		// The Proxmox driver took any 64 characters before.
		"not hex":     {hypervisor.ImageSpec{Checksum: "sha256:" + strings.Repeat("z", 64)}, "must be sha256: and 64 lowercase hex digits"},
		"uppercase":   {hypervisor.ImageSpec{Checksum: "sha256:" + strings.ToUpper(sum)}, "64 lowercase hex digits"},
		"sha512":      {hypervisor.ImageSpec{Checksum: "sha512:" + sum}, "must be sha256:"},
		"neither":     {hypervisor.ImageSpec{URL: "https://x/a.img"}, "neither checksum nor checksumURL"},
		"not listed":  {hypervisor.ImageSpec{URL: "https://x/a.img", ChecksumURL: srv.URL + "/SHA256SUMS"}, "lists no sha256 for a.img"},
		"not served":  {hypervisor.ImageSpec{URL: "https://x/a.img", ChecksumURL: srv.URL + "/nope"}, "404 Not Found"},
		"credentials": {hypervisor.ImageSpec{URL: "https://x/a.img", ChecksumURL: "http://user:hunter2@127.0.0.1:1/SHA256SUMS"}, "fetching http://REDACTED@127.0.0.1:1/SHA256SUMS"},
	} {
		_, err := Checksum(ctx, srv.Client(), c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error shows the password: %v", name, err)
		}
	}
}

func TestSeedISOIsNoCloud(t *testing.T) {
	ud := []byte("#cloud-config\nhostname: mgmt\n")
	iso, err := SeedISO("labctl-mgmt", hypervisor.CloudInit{UserData: ud})
	if err != nil {
		t.Fatal(err)
	}
	img, err := iso9660.OpenImage(bytes.NewReader(iso))
	if err != nil {
		t.Fatal(err)
	}
	// cloud-init's NoCloud datasource finds the seed by this label.
	if label, err := img.Label(); err != nil || label != "cidata" {
		t.Errorf("label %q, %v", label, err)
	}
	root, _ := img.RootDir()
	kids, _ := root.GetChildren()
	files := map[string]string{}
	for _, f := range kids {
		data, _ := io.ReadAll(f.Reader())
		files[strings.ToLower(f.Name())] = string(data)
	}
	if files["user-data"] != string(ud) {
		t.Errorf("user-data %q", files["user-data"])
	}
	if !strings.Contains(files["meta-data"], "local-hostname: labctl-mgmt") || !strings.Contains(files["meta-data"], "instance-id:") {
		t.Errorf("meta-data %q: want the VM name as hostname and an instance id", files["meta-data"])
	}
	if _, ok := files["network-config"]; ok {
		t.Error("network-config written without one: the image's DHCP default must hold")
	}
	if _, err := SeedISO("vm", hypervisor.CloudInit{}); err == nil || !strings.Contains(err.Error(), "VM vm:") {
		t.Errorf("no user-data: %v", err)
	}
}
