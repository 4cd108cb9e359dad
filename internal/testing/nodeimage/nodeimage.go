// Package nodeimage puts a node image on a test libvirtd as 'labctl
// image build' leaves it: a volume of the pool, uploaded through the
// libvirt driver's EnsureImage with its sha256 checked, so that the
// verified-upload marker the driver's FindImage looks for is there too.
// (Its own package: the libvirt driver's tests use libvirttest, which
// cannot import the driver.)
package nodeimage

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/libvirt"
	"github.com/labctl/labctl/internal/testing/libvirttest"
)

// Place uploads a 64-byte qcow2 header of a 1 GiB virtual disk (the
// test driver stores no data) as volume into pool on d, defining the
// pool at /<pool> when missing, and returns the driver, as host name,
// for the test to use; it is closed when the test ends.
func Place(t testing.TB, d *libvirttest.Daemon, name, pool, volume string) *libvirt.Driver {
	t.Helper()
	img := make([]byte, 64)
	copy(img, []byte{'Q', 'F', 'I', 0xfb})
	binary.BigEndian.PutUint32(img[4:], 3)
	binary.BigEndian.PutUint64(img[24:], 1<<30) // 1 GiB virtual
	sum := sha256.Sum256(img)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(img) }))
	t.Cleanup(srv.Close)
	var mu sync.Mutex
	drv, err := libvirt.New(t.Context(), libvirt.Options{
		Name: name, URI: d.URI(), Pool: pool, PoolPath: "/" + pool, Network: "default",
		Upload: func(_ context.Context, _ string, r io.Reader, _ int64) error {
			mu.Lock()
			defer mu.Unlock()
			_, err := io.Copy(io.Discard, r)
			return err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = drv.Close() })
	if err := drv.PrepareHost(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := drv.EnsureImage(t.Context(), hypervisor.ImageSpec{
		URL: srv.URL + "/" + volume, Checksum: "sha256:" + hex.EncodeToString(sum[:]), FileName: volume,
	}); err != nil {
		t.Fatal(err)
	}
	return drv
}
