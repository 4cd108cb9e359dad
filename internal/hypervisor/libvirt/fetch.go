package libvirt

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/redact"
)

var (
	sha256Hex  = regexp.MustCompile(`^[0-9a-f]{64}$`)
	volumeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]*$`)
)

// httpClient fetches images and checksum files. No overall timeout: an
// image can take minutes; ctx bounds it.
var httpClient = &http.Client{Transport: &http.Transport{
	Proxy:                 http.ProxyFromEnvironment,
	TLSHandshakeTimeout:   30 * time.Second,
	ResponseHeaderTimeout: 60 * time.Second,
}}

// imageFileName is the volume name of an image: spec.FileName, else the
// last element of its URL.
func imageFileName(spec hypervisor.ImageSpec) (string, error) {
	name := spec.FileName
	if name == "" {
		u, err := url.Parse(spec.URL)
		if err != nil {
			return "", fmt.Errorf("image URL %q: %w", redact.URL(spec.URL), err)
		}
		name = path.Base(u.Path)
	}
	if !volumeName.MatchString(name) || len(name) > 180 {
		return "", fmt.Errorf("image file name %q is not usable as a volume name; set a plain name such as noble-server-cloudimg-amd64.qcow2", name)
	}
	return name, nil
}

// wantChecksum is the image's sha256 in hex: from spec.Checksum
// (sha256:<hex>), else from the SHA256SUMS file at spec.ChecksumURL.
func wantChecksum(ctx context.Context, spec hypervisor.ImageSpec) (string, error) {
	if spec.Checksum != "" {
		hexSum, ok := strings.CutPrefix(spec.Checksum, "sha256:")
		if !ok || !sha256Hex.MatchString(hexSum) {
			return "", fmt.Errorf("image checksum %q must be sha256: and 64 lowercase hex digits", spec.Checksum)
		}
		return hexSum, nil
	}
	if spec.ChecksumURL == "" {
		return "", errors.New("the image has neither checksum nor checksumURL; labctl never uses an unverified image")
	}
	resp, err := get(ctx, spec.ChecksumURL)
	if err != nil {
		return "", err
	}
	body := resp.Body
	defer func() { _ = body.Close() }()
	u, err := url.Parse(spec.URL)
	if err != nil {
		return "", fmt.Errorf("image URL %q: %w", redact.URL(spec.URL), err)
	}
	file := path.Base(u.Path)
	sc := bufio.NewScanner(io.LimitReader(body, 4<<20))
	for sc.Scan() {
		// "<hex> *<name>" (binary) or "<hex>  <name>" (text)
		fields := strings.Fields(sc.Text())
		if len(fields) == 2 && strings.TrimPrefix(fields[1], "*") == file && sha256Hex.MatchString(strings.ToLower(fields[0])) {
			return strings.ToLower(fields[0]), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("reading %s: %w", redact.URL(spec.ChecksumURL), err)
	}
	return "", fmt.Errorf("%s lists no sha256 for %s; check management.image.url and checksumURL", redact.URL(spec.ChecksumURL), file)
}

// get starts a GET and fails on any status but 200.
func get(ctx context.Context, rawURL string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, fmt.Errorf("fetching %s: %w", rawURL, err)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching %s: %w", rawURL, err)
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("fetching %s: %s", rawURL, resp.Status)
	}
	return resp, nil
}

// download is an image being fetched: its format and size come from the
// first bytes, and Sum holds the sha256 of what was read.
type download struct {
	r      *bufio.Reader
	body   io.Closer
	hash   hash.Hash
	Length int64 // bytes in the body; -1 when the server did not say
	Format string
	// Capacity is the disk size the image holds: the qcow2 virtual size,
	// or Length for raw images.
	Capacity uint64
}

// qcow2Magic starts every qcow2 file; the virtual size is at offset 24.
var qcow2Magic = []byte{'Q', 'F', 'I', 0xfb}

func openDownload(ctx context.Context, rawURL string) (*download, error) {
	resp, err := get(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	d := &download{body: resp.Body, hash: sha256.New(), Length: resp.ContentLength}
	d.r = bufio.NewReaderSize(io.TeeReader(resp.Body, d.hash), 1<<20)
	head, err := d.r.Peek(32)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("fetching %s: %w", rawURL, err)
	}
	switch {
	case len(head) == 32 && string(head[:4]) == string(qcow2Magic):
		d.Format = "qcow2"
		d.Capacity = binary.BigEndian.Uint64(head[24:32])
	case d.Length > 0:
		d.Format = "raw"
		d.Capacity = uint64(d.Length)
	default:
		_ = resp.Body.Close()
		return nil, fmt.Errorf("fetching %s: not a qcow2 image, and the server gave no length for a raw one", rawURL)
	}
	return d, nil
}

func (d *download) Read(p []byte) (int, error) { return d.r.Read(p) }

func (d *download) Close() error { return d.body.Close() }

// Sum is the hex sha256 of the bytes read so far.
func (d *download) Sum() string { return hex.EncodeToString(d.hash.Sum(nil)) }

// readerLen is data to upload and its length (-1 unknown).
type readerLen struct {
	io.Reader
	Len int64
}
