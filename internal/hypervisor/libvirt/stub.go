//go:build !cgo || !libvirt_dlopen

package libvirt

import (
	"context"
	"fmt"

	"github.com/labctl/labctl/internal/hypervisor"
)

// Supported is false: this build has no libvirt driver.
const Supported = false

// Driver is a stand-in in builds without cgo; New never returns one.
type Driver struct{ hypervisor.Driver }

// New answers that this build has no libvirt support.
func New(_ context.Context, o Options) (*Driver, error) {
	return nil, fmt.Errorf("libvirt hypervisor %s: %w", o.Name, ErrNoLibvirt)
}

// Close does nothing.
func (d *Driver) Close() error { return nil }
