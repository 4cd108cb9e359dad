package config

import (
	"crypto/x509"
	"fmt"
	"os"

	"github.com/labctl/labctl/internal/files"
)

// ReadCAFile reads h's Proxmox tls.caFile, the one way every reader of it
// (labctl's Proxmox client, the CA labctl hands CAPMOX) does: the PEM
// bytes and the pool they make. Errors name the field and the fix.
func (h *Hypervisor) ReadCAFile() ([]byte, *x509.CertPool, error) {
	if h.Proxmox == nil || h.Proxmox.TLS.CAFile == "" {
		return nil, nil, fmt.Errorf("hypervisors[%s] sets no proxmox.tls.caFile", h.Name)
	}
	field := fmt.Sprintf("hypervisors[%s].proxmox.tls.caFile", h.Name)
	path, err := files.ExpandHome(h.Proxmox.TLS.CAFile)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", field, err)
	}
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: reading the CA file: %w (copy /etc/pve/pve-root-ca.pem from the node)", field, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, nil, fmt.Errorf("%s: %s holds no PEM certificate", field, path)
	}
	return pem, pool, nil
}
