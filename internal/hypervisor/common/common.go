// Package common holds what the Proxmox and libvirt drivers do alike, as
// kind keeps providers/common for its container engines: the checksum an
// image must match, the GET both use to fetch from an image server, and the
// NoCloud seed ISO of a VM. Each rule is here once, so the drivers cannot
// drift apart.
package common

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/labctl/labctl/internal/cloudinit"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/redact"
)

// maxSums bounds a SHA256SUMS file: Ubuntu's lists a few dozen images in a
// few KiB; a wrong URL (the image itself) must not be scanned whole.
const maxSums = 4 << 20

// Checksum is the sha256 (64 lowercase hex digits) spec's image must have:
// spec.Checksum (sha256:<hex>), else the line for the image's file name in
// the SHA256SUMS file at spec.ChecksumURL, fetched with hc. labctl never
// uses an image it cannot verify.
func Checksum(ctx context.Context, hc *http.Client, spec hypervisor.ImageSpec) (string, error) {
	if spec.Checksum != "" {
		sum, ok := strings.CutPrefix(spec.Checksum, "sha256:")
		if !ok || !IsSHA256(sum) {
			return "", fmt.Errorf("image checksum %q must be sha256: and 64 lowercase hex digits", spec.Checksum)
		}
		return sum, nil
	}
	if spec.ChecksumURL == "" {
		return "", errors.New("the image has neither checksum nor checksumURL; labctl never uses an unverified image: set one (management.image or images[])")
	}
	u, err := url.Parse(spec.URL)
	if err != nil {
		return "", fmt.Errorf("image URL %q: %w", redact.URL(spec.URL), err)
	}
	file := path.Base(u.Path) // the name SHA256SUMS lists, without any query
	resp, err := Get(ctx, hc, spec.ChecksumURL)
	if err != nil {
		return "", &hypervisor.ChecksumListError{Err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(io.LimitReader(resp.Body, maxSums))
	for sc.Scan() {
		// "<hex> *<name>" (binary mode) or "<hex>  <name>" (text mode), as
		// sha256sum writes them.
		f := strings.Fields(sc.Text())
		if len(f) == 2 && strings.TrimPrefix(f[1], "*") == file && IsSHA256(strings.ToLower(f[0])) {
			return strings.ToLower(f[0]), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("reading %s: %w", redact.URL(spec.ChecksumURL), err)
	}
	return "", fmt.Errorf("%s lists no sha256 for %s; check the image's url and checksumURL", redact.URL(spec.ChecksumURL), file)
}

// IsSHA256 says whether s is a sha256 in 64 lowercase hex digits.
func IsSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Get starts a GET of rawURL with hc and fails on any status but 200. The
// URL is redacted in errors: it may carry credentials.
func Get(ctx context.Context, hc *http.Client, rawURL string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, fmt.Errorf("fetching %s: %w", redact.URL(rawURL), err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		// url.Error repeats the raw URL; say it redacted instead.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("fetching %s: %w", redact.URL(rawURL), err)
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("fetching %s: %s", redact.URL(rawURL), resp.Status)
	}
	return resp, nil
}

// SeedISO is the NoCloud seed of VM name: its user-data, meta-data (with
// ci.InstanceID, else an instance id that changes with the data, so
// cloud-init runs again on new data, and the hostname, name unless set)
// and network-config.
func SeedISO(name string, ci hypervisor.CloudInit) ([]byte, error) {
	host := ci.Hostname
	if host == "" {
		host = name
	}
	id := ci.InstanceID
	if id == "" {
		id = cloudinit.InstanceID(name, ci.UserData, ci.NetworkConfig)
	}
	md, err := cloudinit.MetaDataWithProviderID(id, host, ci.ProviderID)
	if err != nil {
		return nil, fmt.Errorf("VM %s: %w", name, err)
	}
	iso, err := cloudinit.SeedISO(cloudinit.Seed{UserData: ci.UserData, MetaData: md, NetworkConfig: ci.NetworkConfig})
	if err != nil {
		return nil, fmt.Errorf("VM %s: %w", name, err)
	}
	return iso, nil
}
