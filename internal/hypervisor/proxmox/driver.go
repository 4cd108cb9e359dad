package proxmox

import (
	"fmt"
	"net/http"

	pve "github.com/luthermonson/go-proxmox"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
)

// Driver is hypervisor.Driver for one Proxmox VE endpoint of lab.yaml.
type Driver struct {
	name string
	cfg  *config.Proxmox
	c    *pve.Client
	hc   *http.Client
	o    Options
	// auth is the Authorization header value; used only for uploads,
	// which go-proxmox sends without a context.
	auth string
}

var _ hypervisor.Driver = (*Driver)(nil)

// New connects nothing yet: it builds the client for the endpoint o
// names, with its TLS trust.
func New(o Options) (*Driver, error) {
	o.defaults()
	c, hc, err := newClient(o)
	if err != nil {
		return nil, err
	}
	return &Driver{name: o.Name, cfg: &o.Endpoint, c: c, hc: hc, o: o,
		auth: "PVEAPIToken=" + o.Endpoint.TokenID + "=" + o.TokenSecret}, nil
}

// Name is the hypervisor's name in lab.yaml.
func (d *Driver) Name() string { return d.name }

func (d *Driver) node(name string) (config.PVENode, error) {
	for _, n := range d.cfg.Nodes {
		if n.Name == name {
			return n, nil
		}
	}
	return config.PVENode{}, fmt.Errorf("node %q is not listed in %s: add it there", name, field(d.name, "nodes"))
}

// api wraps a go-proxmox call's error with what was being done.
func api(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), err)
}
