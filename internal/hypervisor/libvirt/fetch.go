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
	"time"

	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/common"
	"github.com/labctl/labctl/internal/redact"
)

var volumeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]*$`)

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
	resp, err := common.Get(ctx, httpClient, rawURL)
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
