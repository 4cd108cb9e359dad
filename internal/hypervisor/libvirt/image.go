package libvirt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	lv "github.com/digitalocean/go-libvirt"

	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/common"
	"github.com/labctl/labctl/internal/redact"
)

// FindImage returns the image volume when its upload was verified, or
// ErrNotFound. It reads only.
func (d *Driver) FindImage(ctx context.Context, spec hypervisor.ImageSpec) (hypervisor.Image, error) {
	if err := ctx.Err(); err != nil {
		return hypervisor.Image{}, err
	}
	name, err := imageFileName(spec)
	if err != nil {
		return hypervisor.Image{}, err
	}
	p, err := d.pool()
	if err != nil {
		return hypervisor.Image{}, err
	}
	return d.findImage(p, name, spec.Checksum)
}

// findImage looks for the image volume and a marker of its verified
// upload; with a checksum, the marker must carry it.
func (d *Driver) findImage(p lv.StoragePool, name, checksum string) (hypervisor.Image, error) {
	v, ok, err := d.lookupVolume(p, name)
	if err != nil {
		return hypervisor.Image{}, err
	}
	if !ok {
		return hypervisor.Image{}, fmt.Errorf("image %s in pool %s: %w", name, d.opts.Pool, hypervisor.ErrNotFound)
	}
	path, err := d.l.StorageVolGetPath(v)
	if err != nil {
		return hypervisor.Image{}, fmt.Errorf("reading the path of volume %s: %w", name, err)
	}
	markers, err := d.markers(p, name)
	if err != nil {
		return hypervisor.Image{}, err
	}
	want := strings.TrimPrefix(checksum, "sha256:")
	for _, m := range markers {
		if want == "" || m == want {
			return hypervisor.Image{Volume: path}, nil
		}
	}
	if len(markers) > 0 {
		return hypervisor.Image{}, fmt.Errorf("volume %s in pool %s holds another image (sha256 %s, want %s); delete it with 'virsh vol-delete --pool %s %s' or give this image another file name",
			name, d.opts.Pool, markers[0], want, d.opts.Pool, name)
	}
	return hypervisor.Image{}, fmt.Errorf("volume %s in pool %s exists but labctl never finished and verified its upload (an upload killed mid-way, or a volume made by hand); delete it with 'virsh vol-delete --pool %s %s' and re-run",
		name, d.opts.Pool, d.opts.Pool, name)
}

// markers lists the checksums of the verified-upload markers of an image.
func (d *Driver) markers(p lv.StoragePool, image string) ([]string, error) {
	names, err := d.volumeNames(p)
	if err != nil {
		return nil, err
	}
	var sums []string
	for _, n := range names {
		if sum, ok := strings.CutPrefix(n, markerPrefix(image)); ok && common.IsSHA256(sum) {
			sums = append(sums, sum)
		}
	}
	return sums, nil
}

// VolumeNames lists the volumes of the configured pool. Not part of
// hypervisor.Driver: tests use it to see what a VM left behind.
func (d *Driver) VolumeNames(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, err := d.pool()
	if err != nil {
		return nil, err
	}
	return d.volumeNames(p)
}

// volumeNames lists the names of the volumes in p.
func (d *Driver) volumeNames(p lv.StoragePool) ([]string, error) {
	vols, _, err := d.l.StoragePoolListAllVolumes(p, 1, 0)
	if err != nil {
		return nil, fmt.Errorf("listing volumes of pool %s: %w", d.opts.Pool, err)
	}
	names := make([]string, len(vols))
	for i, v := range vols {
		names[i] = v.Name
	}
	return names, nil
}

// EnsureImage uploads the image into the pool by stream while hashing it,
// and marks it verified only when the sha256 matches. A failed or
// interrupted upload deletes its partial volume.
func (d *Driver) EnsureImage(ctx context.Context, spec hypervisor.ImageSpec) (hypervisor.Image, error) {
	name, err := imageFileName(spec)
	if err != nil {
		return hypervisor.Image{}, err
	}
	p, err := d.pool()
	if err != nil {
		return hypervisor.Image{}, err
	}
	img, err := d.findImage(p, name, spec.Checksum)
	if err == nil || !errors.Is(err, hypervisor.ErrNotFound) {
		return img, err
	}

	want, err := common.Checksum(ctx, httpClient, spec)
	if err != nil {
		return hypervisor.Image{}, fmt.Errorf("image %s: %w", name, err)
	}
	dl, err := openDownload(ctx, spec.URL)
	if err != nil {
		return hypervisor.Image{}, fmt.Errorf("image %s: %w", name, err)
	}
	defer func() { _ = dl.Close() }()

	xml, err := volumeXML(name, dl.Format, dl.Capacity, "", "")
	if err != nil {
		return hypervisor.Image{}, err
	}
	vol, err := d.l.StorageVolCreateXML(p, xml, 0)
	if err != nil {
		return hypervisor.Image{}, fmt.Errorf("creating volume %s in pool %s: %w", name, d.opts.Pool, err)
	}
	d.reached("image volume created")
	ok := false
	defer func() {
		if !ok {
			_ = d.deleteVolume(p, name)
		}
	}()
	if err := d.upload(ctx, vol, readerLen{Reader: dl, Len: dl.Length}); err != nil {
		return hypervisor.Image{}, fmt.Errorf("uploading %s into pool %s: %w", redact.URL(spec.URL), d.opts.Pool, err)
	}
	if got := dl.Sum(); got != want {
		return hypervisor.Image{}, fmt.Errorf("image %s: sha256 %s does not match the expected %s; the download is corrupt or the pin is wrong, so it was deleted", redact.URL(spec.URL), got, want)
	}
	d.reached("image uploaded")
	if err := ctx.Err(); err != nil {
		return hypervisor.Image{}, err
	}
	markerXML, err := volumeXML(markerPrefix(name)+want, "raw", 0, "", "")
	if err != nil {
		return hypervisor.Image{}, err
	}
	if _, err := d.l.StorageVolCreateXML(p, markerXML, 0); err != nil {
		return hypervisor.Image{}, fmt.Errorf("marking image %s verified: %w", name, err)
	}
	ok = true
	path, err := d.l.StorageVolGetPath(vol)
	if err != nil {
		return hypervisor.Image{}, fmt.Errorf("reading the path of volume %s: %w", name, err)
	}
	if err := d.l.StoragePoolRefresh(p, 0); err != nil {
		return hypervisor.Image{}, fmt.Errorf("refreshing pool %s: %w", d.opts.Pool, err)
	}
	return hypervisor.Image{Volume: path}, nil
}

// RemoveImage deletes an image volume and its markers. VMs backed by it
// must be gone first. Not part of hypervisor.Driver: tests and cleanup use it.
func (d *Driver) RemoveImage(ctx context.Context, spec hypervisor.ImageSpec) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	name, err := imageFileName(spec)
	if err != nil {
		return err
	}
	p, err := d.pool()
	if err != nil {
		return err
	}
	sums, err := d.markers(p, name)
	if err != nil {
		return err
	}
	for _, s := range sums {
		if err := d.deleteVolume(p, markerPrefix(name)+s); err != nil {
			return err
		}
	}
	return d.deleteVolume(p, name)
}

// streamUpload sends r into vol through a libvirt stream. A cancelled
// ctx fails the next read, and go-libvirt then aborts the stream, so the
// daemon drops what it got.
func (d *Driver) streamUpload(ctx context.Context, vol lv.StorageVol, r readerLen) error {
	length := uint64(0) // 0: until the stream ends
	if r.Len > 0 {
		length = uint64(r.Len)
	}
	err := d.l.StorageVolUpload(vol, ctxReader{ctx: ctx, r: r}, 0, length, 0)
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if err != nil {
		return fmt.Errorf("streaming into volume %s: %w", vol.Name, err)
	}
	return nil
}

// ctxReader fails reads once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// uploadBytes creates a raw volume holding data, replacing one of the same
// name.
func (d *Driver) uploadBytes(ctx context.Context, p lv.StoragePool, name string, data []byte) error {
	if err := d.deleteVolume(p, name); err != nil {
		return err
	}
	xml, err := volumeXML(name, "raw", uint64(len(data)), "", "")
	if err != nil {
		return err
	}
	vol, err := d.l.StorageVolCreateXML(p, xml, 0)
	if err != nil {
		return fmt.Errorf("creating volume %s: %w", name, err)
	}
	if err := d.upload(ctx, vol, readerLen{Reader: bytes.NewReader(data), Len: int64(len(data))}); err != nil {
		_ = d.deleteVolume(p, name)
		return fmt.Errorf("uploading volume %s: %w", name, err)
	}
	return nil
}
