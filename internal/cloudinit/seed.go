package cloudinit

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/kdomanski/iso9660"
)

// VolumeLabel is the label cloud-init's NoCloud source looks for.
const VolumeLabel = "cidata"

// Seed is the set of NoCloud documents on a seed ISO.
type Seed struct {
	UserData []byte
	MetaData []byte
	// NetworkConfig is optional; without it the image's default (DHCP) holds.
	NetworkConfig []byte
}

// SeedISO builds the NoCloud seed as an ISO9660 image labelled cidata with
// user-data, meta-data and, when set, network-config.
func SeedISO(s Seed) ([]byte, error) {
	if len(s.UserData) == 0 || len(s.MetaData) == 0 {
		return nil, errors.New("building the cloud-init seed ISO: user-data and meta-data are required")
	}
	w, err := iso9660.NewWriter()
	if err != nil {
		return nil, fmt.Errorf("building the cloud-init seed ISO: %w", err)
	}
	defer func() { _ = w.Cleanup() }()
	files := []struct {
		name string
		data []byte
	}{{"user-data", s.UserData}, {"meta-data", s.MetaData}, {"network-config", s.NetworkConfig}}
	for _, f := range files {
		if f.data == nil {
			continue
		}
		if err := w.AddFile(bytes.NewReader(f.data), f.name); err != nil {
			return nil, fmt.Errorf("building the cloud-init seed ISO: adding %s: %w", f.name, err)
		}
	}
	var buf bytes.Buffer
	if err := w.WriteTo(&buf, VolumeLabel); err != nil {
		return nil, fmt.Errorf("building the cloud-init seed ISO: %w", err)
	}
	return buf.Bytes(), nil
}
