package proxmox

import (
	"context"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/common"
	"github.com/labctl/labctl/internal/redact"
)

type content struct {
	VolID   string `json:"volid"`
	Content string `json:"content"`
	Size    int64  `json:"size"`
}

func (d *Driver) contents(ctx context.Context, node, storage, kind string) ([]content, error) {
	var out []content
	err := d.c.Get(ctx, fmt.Sprintf("/nodes/%s/storage/%s/content?content=%s", node, storage, kind), &out)
	return out, api(err, "listing %s content of storage %s on node %s", kind, storage, node)
}

// ImageFileName is the import file name of a cloud image: its URL's base
// name with a .qcow2 extension (PVE imports only known extensions), and
// the checksum's first 12 hex digits, so a new pin is a new file and a
// file that is there was verified against this checksum.
func ImageFileName(spec hypervisor.ImageSpec, sha string) string {
	name := spec.FileName
	if name == "" {
		name = path.Base(spec.URL)
	}
	name = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, ".qcow2"), ".img"), ".raw")
	if len(sha) >= 12 {
		name += "-" + sha[:12]
	}
	return name + ".qcow2"
}

// FindImage returns the image EnsureImage would place, or
// hypervisor.ErrNotFound. It only reads (dry runs and plans call it).
func (d *Driver) FindImage(ctx context.Context, spec hypervisor.ImageSpec) (hypervisor.Image, error) {
	n, err := d.node(spec.Node)
	if err != nil {
		return hypervisor.Image{}, err
	}
	sha, err := d.checksum(ctx, spec)
	if err != nil {
		return hypervisor.Image{}, err
	}
	img := hypervisor.Image{Node: n.Name, Volume: n.ImageStorage + ":import/" + ImageFileName(spec, sha)}
	have, err := d.hasVolume(ctx, n.Name, n.ImageStorage, "import", img.Volume)
	if err == nil && !have {
		err = fmt.Errorf("image %s on node %s: %w", img.Volume, n.Name, hypervisor.ErrNotFound)
	}
	return img, err
}

// EnsureImage downloads the cloud image onto the node's image storage with
// download-url (content import), verified by PVE against its sha256, and
// does nothing when the file is already there.
func (d *Driver) EnsureImage(ctx context.Context, spec hypervisor.ImageSpec) (hypervisor.Image, error) {
	n, err := d.node(spec.Node)
	if err != nil {
		return hypervisor.Image{}, err
	}
	sha, err := d.checksum(ctx, spec)
	if err != nil {
		return hypervisor.Image{}, err
	}
	file := ImageFileName(spec, sha)
	img := hypervisor.Image{Node: n.Name, Volume: n.ImageStorage + ":import/" + file}
	have, err := d.hasVolume(ctx, n.Name, n.ImageStorage, "import", img.Volume)
	if err != nil || have {
		return img, err
	}
	// An interrupted run may have left its download running: wait for it
	// rather than fetch the image twice.
	upid, err := d.activeTask(ctx, n.Name, "download", file)
	if err != nil {
		return img, err
	}
	if upid == "" {
		err = d.c.Post(ctx, fmt.Sprintf("/nodes/%s/storage/%s/download-url", n.Name, n.ImageStorage), map[string]any{
			"content": "import", "filename": file, "url": spec.URL,
			"checksum": sha, "checksum-algorithm": "sha256", "verify-certificates": 1,
		}, &upid)
	}
	if err == nil {
		err = d.wait(ctx, upid)
	}
	if err != nil && strings.Contains(err.Error(), "refusing to override existing file") {
		// Another download of this very file finished first.
		if have, herr := d.hasVolume(ctx, n.Name, n.ImageStorage, "import", img.Volume); herr == nil && have {
			return img, nil
		}
	}
	return img, api(err, "downloading %s to %s on node %s", redact.URL(spec.URL), img.Volume, n.Name)
}

// activeTask returns the UPID of a running task of type typ and id on node, or "".
func (d *Driver) activeTask(ctx context.Context, node, typ, id string) (string, error) {
	var list []struct {
		UPID string `json:"upid"`
		ID   string `json:"id"`
		Type string `json:"type"`
	}
	if err := d.c.Get(ctx, fmt.Sprintf("/nodes/%s/tasks?source=active&typefilter=%s", node, typ), &list); err != nil {
		return "", api(err, "listing the running %s tasks of node %s", typ, node)
	}
	for _, t := range list {
		if t.Type == typ && t.ID == id {
			return t.UPID, nil
		}
	}
	return "", nil
}

func (d *Driver) hasVolume(ctx context.Context, node, storage, kind, volid string) (bool, error) {
	list, err := d.contents(ctx, node, storage, kind)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(list, func(c content) bool { return c.VolID == volid }), nil
}

// checksum is the image's sha256 in hex (common.Checksum, the rule both
// drivers share).
func (d *Driver) checksum(ctx context.Context, spec hypervisor.ImageSpec) (string, error) {
	return common.Checksum(ctx, d.sumsClient(), spec)
}

// SumsClient fetches checksum files; tests replace it.
var SumsClient = &http.Client{Timeout: 30 * time.Second}

func (d *Driver) sumsClient() *http.Client { return SumsClient }
