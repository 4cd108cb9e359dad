package libvirt

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	lv "github.com/digitalocean/go-libvirt"

	"github.com/labctl/labctl/internal/hypervisor/common"
)

// LocalImage is a disk image on this machine (the qcow2 'image build'
// made) to hold in the pool as a named volume.
type LocalImage struct {
	Path   string // the file here
	Volume string // the volume's name in the pool
	SHA256 string // hex digest of the file
	Size   int64  // bytes in the file
}

// VolumeState says what a pool holds of a LocalImage.
type VolumeState int

const (
	// VolumeMissing: no volume of that name.
	VolumeMissing VolumeState = iota
	// VolumeCurrent: the volume has the image's verified-upload marker
	// and as many bytes as the image (with verify, its bytes were read
	// back and hash to the image's sha256).
	VolumeCurrent
	// VolumeIncomplete: a volume of that name that is not the verified
	// image: an upload cut off (no marker), or fewer or more bytes, or
	// (with verify) other bytes. Replacing it is safe: no VM can be
	// backed by it, since FindImage refuses a volume without a marker.
	VolumeIncomplete
)

// VolumeCheck is what CheckVolume found.
type VolumeCheck struct {
	State VolumeState
	// Why says why a volume is incomplete.
	Why string
	// Physical is the volume's size on the host (0 when missing).
	Physical uint64
	// Available is the pool's free space.
	Available uint64
}

// CheckVolume looks at img's volume in the pool. A volume that is the
// verified upload of another image (a marker with another sha256) is an
// error: VMs may be backed by it, so it is never replaced. verify reads
// the volume back and hashes it, which costs as much as an upload; without
// it the marker and the size decide.
func (d *Driver) CheckVolume(ctx context.Context, img LocalImage, verify bool) (VolumeCheck, error) {
	if err := ctx.Err(); err != nil {
		return VolumeCheck{}, err
	}
	p, err := d.pool()
	if err != nil {
		return VolumeCheck{}, err
	}
	var c VolumeCheck
	if _, _, _, c.Available, err = d.l.StoragePoolGetInfo(p); err != nil {
		return c, fmt.Errorf("reading the free space of pool %s on %s: %w", d.opts.Pool, d.opts.Name, err)
	}
	v, ok, err := d.lookupVolume(p, img.Volume)
	if err != nil || !ok {
		return c, err
	}
	// VIR_STORAGE_VOL_GET_PHYSICAL: the allocation field is then the
	// file's size, not the blocks it uses (a qcow2 is sparse).
	if _, _, c.Physical, err = d.l.StorageVolGetInfoFlags(v, uint32(lv.StorageVolGetPhysical)); err != nil {
		return c, fmt.Errorf("reading the size of volume %s on %s: %w", img.Volume, d.opts.Name, err)
	}
	sums, err := d.markers(p, img.Volume)
	if err != nil {
		return c, err
	}
	c.State = VolumeIncomplete
	for _, s := range sums {
		// Without a sha256 (a dry run before the build) there is
		// nothing to compare.
		if img.SHA256 != "" && s != img.SHA256 {
			return c, fmt.Errorf("volume %s in pool %s on %s is the verified upload of another build of this image (sha256 %s; this build's is %s), and VMs may be backed by it, so labctl does not replace it: once no VM uses it, delete it with 'virsh vol-delete --pool %s %s' and 'virsh vol-delete --pool %s %s%s', or give the image another name",
				img.Volume, d.opts.Pool, d.opts.Name, s, img.SHA256, d.opts.Pool, img.Volume, d.opts.Pool, markerPrefix(img.Volume), s)
		}
	}
	switch {
	case len(sums) == 0:
		c.Why = "it has no verified-upload marker (an upload that was cut off, or a volume made by hand)"
	case c.Physical != uint64(img.Size):
		c.Why = fmt.Sprintf("it holds %d bytes, the image %d (truncated or overwritten)", c.Physical, img.Size)
	case verify:
		got, err := d.volumeSHA256(ctx, v, img.Size, nil)
		if err != nil {
			return c, fmt.Errorf("reading volume %s back from %s: %w", img.Volume, d.opts.Name, err)
		}
		if got != img.SHA256 {
			c.Why = fmt.Sprintf("its bytes hash to sha256 %s, not the image's %s (corrupted)", got, img.SHA256)
		} else {
			c.State = VolumeCurrent
		}
	default:
		c.State = VolumeCurrent
	}
	return c, nil
}

// PutVolume uploads img into the pool as its volume, replacing an
// incomplete one, reads it back to check its sha256, and only then writes
// the verified-upload marker FindImage looks for. A failed, mismatched or
// cancelled upload deletes the volume it made; cancelling takes effect
// within one streamChunk. progress gets what is
// under way ("upload", then "read back") and the bytes done so far.
func (d *Driver) PutVolume(ctx context.Context, img LocalImage, progress func(what string, done int64)) (err error) {
	if progress == nil {
		progress = func(string, int64) {}
	}
	if !common.IsSHA256(img.SHA256) {
		return fmt.Errorf("image %s: %q is not a hex sha256", img.Path, img.SHA256)
	}
	p, err := d.pool()
	if err != nil {
		return err
	}
	f, err := os.Open(img.Path)
	if err != nil {
		return fmt.Errorf("opening the image: %w", err)
	}
	defer f.Close()
	head := make([]byte, 32)
	if _, err := io.ReadFull(f, head); err != nil {
		return fmt.Errorf("reading the header of %s: %w", img.Path, err)
	}
	if string(head[:4]) != string(qcow2Magic) {
		return fmt.Errorf("%s is not a qcow2 image (no QFI\\xfb magic)", img.Path)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	capacity := binary.BigEndian.Uint64(head[24:32])
	// Incomplete volumes and stale markers go first; a marker of another
	// image was refused by CheckVolume.
	sums, err := d.markers(p, img.Volume)
	if err != nil {
		return err
	}
	for _, s := range sums {
		if err := d.deleteVolume(p, markerPrefix(img.Volume)+s); err != nil {
			return err
		}
	}
	if err := d.deleteVolume(p, img.Volume); err != nil {
		return err
	}
	xml, err := volumeXML(img.Volume, "qcow2", capacity, "", "")
	if err != nil {
		return err
	}
	vol, err := d.l.StorageVolCreateXML(p, xml, 0)
	if err != nil {
		return fmt.Errorf("creating volume %s in pool %s on %s: %w", img.Volume, d.opts.Pool, d.opts.Name, err)
	}
	d.reached("volume created")
	defer func() {
		if err != nil {
			// Not ctx: Ctrl-C must still remove the partial volume.
			if derr := d.deleteVolume(p, img.Volume); derr != nil {
				err = fmt.Errorf("%w (and removing the partial volume failed: %v; delete it with 'virsh vol-delete --pool %s %s')", err, derr, d.opts.Pool, img.Volume)
			}
		}
	}()
	sent, err := d.uploadChunks(ctx, vol, f, img.Size, func(n int64) { progress("upload", n) })
	if err != nil {
		return fmt.Errorf("uploading %s into pool %s on %s: %w", img.Path, d.opts.Pool, d.opts.Name, err)
	}
	if sent != img.Size {
		return fmt.Errorf("uploading %s: sent %d bytes, the file has %d (it changed during the upload?)", img.Path, sent, img.Size)
	}
	progress("upload", sent)
	// The stream writes over the file the pool made; it must now be the
	// image, byte for byte and no longer.
	if _, _, phys, err := d.l.StorageVolGetInfoFlags(vol, uint32(lv.StorageVolGetPhysical)); err != nil {
		return fmt.Errorf("reading the size of volume %s on %s: %w", img.Volume, d.opts.Name, err)
	} else if phys != uint64(img.Size) {
		return fmt.Errorf("volume %s on %s holds %d bytes after the upload, the image %d", img.Volume, d.opts.Name, phys, img.Size)
	}
	d.reached("volume uploaded")
	got, err := d.volumeSHA256(ctx, vol, img.Size, func(n int64) { progress("read back", n) })
	if err != nil {
		return fmt.Errorf("reading volume %s back from %s to check it: %w", img.Volume, d.opts.Name, err)
	}
	if got != img.SHA256 {
		return fmt.Errorf("volume %s on %s reads back as sha256 %s, not the image's %s; it was deleted", img.Volume, d.opts.Name, got, img.SHA256)
	}
	d.reached("volume verified")
	if err := ctx.Err(); err != nil {
		return err
	}
	markerXML, err := volumeXML(markerPrefix(img.Volume)+img.SHA256, "raw", 0, "", "")
	if err != nil {
		return err
	}
	if _, err := d.l.StorageVolCreateXML(p, markerXML, 0); err != nil {
		return fmt.Errorf("marking volume %s verified: %w", img.Volume, err)
	}
	return nil
}

// streamChunk is how much one volume stream carries. The upload and the
// read back go in streams of this size, with ctx checked between them,
// so Ctrl-C ends them within one chunk and every stream ends normally:
// go-libvirt (v0.0.0-20261013170128) deadlocks when a download's writer
// fails (its router holds the callback lock while it hands the next
// packet to a reader that is gone), and an aborted upload waits for the
// daemon's answer to the abort.
const streamChunk = 64 << 20

// uploadChunks writes size bytes of f into vol, chunk by chunk, and
// returns how many it sent; progress gets the running total.
func (d *Driver) uploadChunks(ctx context.Context, vol lv.StorageVol, f io.ReaderAt, size int64, progress func(int64)) (int64, error) {
	var sent int64
	for off := int64(0); off < size; off += streamChunk {
		if err := ctx.Err(); err != nil {
			return sent, err
		}
		n := min(streamChunk, size-off)
		r := &countingReader{r: io.NewSectionReader(f, off, n), report: func(c int64) { progress(sent + c) }}
		if err := d.l.StorageVolUpload(vol, r, uint64(off), uint64(n), 0); err != nil {
			return sent, fmt.Errorf("streaming bytes %d to %d into volume %s: %w", off, off+n, vol.Name, err)
		}
		sent += r.n
	}
	return sent, nil
}

// volumeSHA256 streams the first n bytes of vol back, chunk by chunk,
// and hashes them; progress, when set, gets the bytes read.
func (d *Driver) volumeSHA256(ctx context.Context, vol lv.StorageVol, n int64, progress func(int64)) (string, error) {
	h := sha256.New()
	w := &countingWriter{w: h, report: progress}
	for off := int64(0); off < n; off += streamChunk {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		if err := d.l.StorageVolDownload(vol, w, uint64(off), uint64(min(streamChunk, n-off)), 0); err != nil {
			return "", err
		}
	}
	if w.n != n {
		return "", fmt.Errorf("read %d bytes back, want %d", w.n, n)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// FileSHA256 is the hex sha256 and size of a local file; ctx ends a long
// read.
func FileSHA256(ctx context.Context, path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, ctxReader{ctx: ctx, r: f})
	if err != nil {
		return "", 0, fmt.Errorf("hashing %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// countingReader counts what was read and reports it at most every
// 200 ms, and once at the end.
type countingReader struct {
	r      io.Reader
	n      int64
	last   time.Time
	report func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.report != nil && (errors.Is(err, io.EOF) || time.Since(c.last) >= 200*time.Millisecond) {
		c.last = time.Now()
		c.report(c.n)
	}
	return n, err
}

// countingWriter counts bytes (reported at most every 200 ms). It never
// fails: see streamChunk.
type countingWriter struct {
	w      io.Writer
	n      int64
	last   time.Time
	report func(int64)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, _ := c.w.Write(p) // a hash never fails
	c.n += int64(n)
	if c.report != nil && time.Since(c.last) >= 200*time.Millisecond {
		c.last = time.Now()
		c.report(c.n)
	}
	return len(p), nil
}
