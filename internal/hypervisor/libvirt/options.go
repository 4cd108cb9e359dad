// Package libvirt is labctl's hypervisor.Driver for KVM hosts. It speaks
// libvirt's RPC protocol in pure Go (github.com/digitalocean/go-libvirt),
// so labctl needs neither cgo nor libvirt's client library, on any OS or
// architecture; every XML document goes through libvirt.org/go/libvirtxml.
// It dials the daemon itself (connect.go): the local unix socket, ssh
// (ssh.go, the way libvirt's own ssh transport does it) or TLS (tls.go).
//
// What labctl makes on a host:
//   - a volume per cloud image in the storage pool, uploaded by stream and
//     checked against its sha256, with an empty marker volume
//     "<image>.sha256-<hex>" written only after the check passed; the same
//     for each node image 'image build' made here (PutVolume, volume.go),
//     whose volume is read back and hashed before its marker is written;
//   - per VM: a qcow2 overlay "<vm>-disk0.qcow2" backed by the image, a
//     NoCloud seed "<vm>-seed.iso", and a domain carrying labctl's
//     metadata element (namespace MetadataNS) that lists them;
//   - for labs with a network name: that NAT network, when it is missing.
package libvirt

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"
)

// MetadataNS is the XML namespace of labctl's domain metadata element.
const MetadataNS = "https://labctl.dev/xmlns/libvirt/v1"

// metadataPrefix is the element prefix libvirt shows for MetadataNS.
const metadataPrefix = "labctl"

// Options say how to reach one libvirt host and where VMs go on it.
type Options struct {
	// Name is the hypervisor's name in lab.yaml.
	Name string
	// URI is qemu:///system, qemu:///session, qemu+ssh://user@host/system
	// or qemu+tls://host/system (test:///default, served by a libvirtd, in
	// tests).
	URI string
	// SSHKeyFile is the private key for qemu+ssh URIs, besides the keys in
	// ssh-agent; empty means ssh's default ~/.ssh/id_ed25519, id_ecdsa,
	// id_rsa, whichever exist.
	SSHKeyFile string
	// KnownHostsFile, when set, is the only known_hosts file the ssh host
	// key is checked against (the Cluster API provider's, from its
	// credentials Secret); empty means ~/.ssh/known_hosts and
	// /etc/ssh/ssh_known_hosts, as ssh reads them.
	KnownHostsFile string
	// TLS names the CA and client certificate for qemu+tls URIs; empty
	// fields mean libvirt's usual paths.
	TLS TLSFiles
	// DialTimeout bounds reaching the daemon: dial, ssh or TLS handshake
	// and libvirt's open; zero means 20s.
	DialTimeout time.Duration
	// Pool is the storage pool for images, disks and seeds.
	Pool string
	// PoolPath is where PrepareHost defines Pool when it is missing; empty
	// means /var/lib/libvirt/images for "default", else a folder of that
	// name under it.
	PoolPath string
	// Network is a libvirt network name; Bridge a host bridge. One is set.
	Network string
	Bridge  string
	// Subnet and Gateway define Network when PrepareHost creates it: NAT,
	// the gateway as the host's address, DHCP in the upper half.
	Subnet  netip.Prefix
	Gateway netip.Addr
	// LocalOnlyDNS makes a network PrepareHost creates answer only for its
	// own names (dnsmasq no-resolv): guests resolve nothing outside. The
	// test bed uses it.
	LocalOnlyDNS bool
	// DomainType is kvm or qemu; empty picks kvm when the host offers it.
	DomainType string
	// ConsoleLogDir holds each VM's serial console log; empty means
	// /var/log/libvirt/qemu on the host.
	ConsoleLogDir string
	// Upload, when set, replaces libvirt's volume stream
	// (virStorageVolUpload) for the seed ISO and images. Only tests set
	// it: libvirt's test driver (test:///default, which the test bed's
	// libvirtd serves) has no volume streams, so they record the data
	// instead. Production code leaves it nil.
	Upload UploadFunc
	// WrapConn, when set, wraps each connection to the daemon once it is
	// dialed, before libvirt's open goes over it. Only tests set it: the
	// provider's kill test counts the RPC calls on the wire and kills the
	// process between two of them (libvirttest.Cutter). Production code
	// leaves it nil.
	WrapConn func(net.Conn) net.Conn
}

// UploadFunc puts length bytes (-1: unknown) read from r into the named
// volume, which exists and has that capacity.
type UploadFunc func(ctx context.Context, volume string, r io.Reader, length int64) error

func (o Options) validate() error {
	var errs []error
	if o.URI == "" {
		errs = append(errs, errors.New("uri is empty"))
	}
	if o.Pool == "" {
		errs = append(errs, errors.New("storagePool is empty"))
	}
	if (o.Network == "") == (o.Bridge == "") {
		errs = append(errs, errors.New("exactly one of network and bridge must be set"))
	}
	if o.DomainType != "" && o.DomainType != "kvm" && o.DomainType != "qemu" {
		errs = append(errs, fmt.Errorf("domainType %q must be kvm or qemu", o.DomainType))
	}
	if len(errs) > 0 {
		return fmt.Errorf("libvirt hypervisor %s: %w", o.Name, errors.Join(errs...))
	}
	return nil
}

func (o Options) poolPath() string {
	switch {
	case o.PoolPath != "":
		return o.PoolPath
	case o.Pool == "default":
		return "/var/lib/libvirt/images"
	}
	return "/var/lib/libvirt/images/" + o.Pool
}

func (o Options) consoleLog(vm string) string {
	dir := o.ConsoleLogDir
	if dir == "" {
		dir = "/var/log/libvirt/qemu"
	}
	return strings.TrimSuffix(dir, "/") + "/" + vm + "-console.log"
}

// Volume names of one VM: its root disk, its data disks (n from 1) and
// its NoCloud seed.
func diskVolume(vm string) string        { return vm + "-disk0.qcow2" }
func dataVolume(vm string, n int) string { return fmt.Sprintf("%s-disk%d.qcow2", vm, n) }
func seedVolume(vm string) string        { return vm + "-seed.iso" }

// markerPrefix starts the names of an image's verified-upload markers.
func markerPrefix(image string) string { return image + ".sha256-" }

// vmMeta is labctl's metadata element in a domain's XML.
type vmMeta struct {
	XMLName xml.Name `xml:"https://labctl.dev/xmlns/libvirt/v1 vm"`
	Lab     string   `xml:"lab,attr"`
	Tags    []string `xml:"tag"`
	// Volumes are the pool volumes labctl made for this VM; DeleteVM
	// removes them.
	Volumes []string `xml:"volume"`
}

func (m vmMeta) marshal() (string, error) {
	b, err := xml.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("encoding labctl's domain metadata: %w", err)
	}
	return string(b), nil
}

// parseMeta reads the element virDomainGetMetadata returns for
// MetadataNS: libvirt has already matched the namespace and returns the
// element without it.
func parseMeta(s string) (vmMeta, error) {
	var m struct {
		XMLName xml.Name `xml:"vm"`
		Lab     string   `xml:"lab,attr"`
		Tags    []string `xml:"tag"`
		Volumes []string `xml:"volume"`
	}
	if err := xml.Unmarshal([]byte(s), &m); err != nil {
		return vmMeta{}, fmt.Errorf("decoding labctl's domain metadata: %w", err)
	}
	return vmMeta{Lab: m.Lab, Tags: m.Tags, Volumes: m.Volumes}, nil
}
