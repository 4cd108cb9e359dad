package proxmox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"mime/multipart"
	"net/http"
	"strings"

	"github.com/labctl/labctl/internal/config"
)

// seedName is the NoCloud ISO's file name: lab, VM and content hash, so a
// re-run with the same data uploads nothing.
func seedName(lab, name string, iso []byte) string {
	sum := sha256.Sum256(iso)
	return fmt.Sprintf("labctl-%s-%s-%s.iso", lab, name, hex.EncodeToString(sum[:6]))
}

// ensureSeed uploads the NoCloud seed ISO as content iso, unless it is there.
func (d *Driver) ensureSeed(ctx context.Context, n config.PVENode, lab, name string, iso []byte) (string, error) {
	file := seedName(lab, name, iso)
	volid := n.ImageStorage + ":iso/" + file
	have, err := d.hasVolume(ctx, n.Name, n.ImageStorage, "iso", volid)
	if err != nil || have {
		return volid, err
	}
	upid, err := d.upload(ctx, n.Name, n.ImageStorage, "iso", file, iso)
	if err == nil {
		err = d.wait(ctx, upid)
	}
	if err != nil && strings.Contains(err.Error(), "refusing to override") {
		// An interrupted run's upload of the same bytes (same name) landed.
		if have, herr := d.hasVolume(ctx, n.Name, n.ImageStorage, "iso", volid); herr == nil && have {
			return volid, nil
		}
	}
	return volid, api(err, "uploading the cloud-init seed %s to node %s", volid, n.Name)
}

// upload posts a file to the storage upload endpoint. go-proxmox's
// UploadReader takes no context, so the multipart request is built here.
func (d *Driver) upload(ctx context.Context, node, storage, kind, file string, data []byte) (string, error) {
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	sum := sha256.Sum256(data)
	// pveproxy wants these fields before the file part.
	for _, kv := range [][2]string{{"content", kind}, {"checksum-algorithm", "sha256"}, {"checksum", hex.EncodeToString(sum[:])}} {
		if err := w.WriteField(kv[0], kv[1]); err != nil {
			return "", err
		}
	}
	fw, err := w.CreateFormFile("filename", file)
	if err != nil {
		return "", err
	}
	if _, err := fw.Write(data); err != nil {
		return "", err
	}
	if err := w.Close(); err != nil {
		return "", err
	}
	u := strings.TrimSuffix(d.cfg.URL, "/") + fmt.Sprintf("/api2/json/nodes/%s/storage/%s/upload", node, storage)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, &b)
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", w.FormDataContentType())
	req.Header.Set("Authorization", d.auth)
	req.Header.Set("Accept", "application/json")
	res, err := d.hc.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	var out struct {
		Data    string `json:"data"`
		Message string `json:"message"`
	}
	if err := decodeJSON(res.Body, &out); err != nil || res.StatusCode/100 != 2 {
		return "", fmt.Errorf("%s %s", res.Status, strings.TrimSpace(out.Message))
	}
	return out.Data, nil
}
