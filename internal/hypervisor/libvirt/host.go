package libvirt

import (
	"context"
	"fmt"

	lv "github.com/digitalocean/go-libvirt"
)

// PlanHost says what PrepareHost would change: define or start the
// storage pool, and for a lab with a network name, define or start it.
func (d *Driver) PlanHost(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var plan []string
	poolState, err := d.poolState()
	if err != nil {
		return nil, err
	}
	switch poolState {
	case missing:
		plan = append(plan, fmt.Sprintf("define storage pool %s (directory %s) and start it", d.opts.Pool, d.opts.poolPath()))
	case inactive:
		plan = append(plan, fmt.Sprintf("start storage pool %s", d.opts.Pool))
	}
	if d.opts.Network == "" {
		return plan, nil
	}
	netState, err := d.networkState()
	if err != nil {
		return nil, err
	}
	switch netState {
	case missing:
		if !d.opts.Subnet.IsValid() {
			return nil, fmt.Errorf("network %s does not exist on %s, and labctl cannot define it without the lab's network.cidr and gateway", d.opts.Network, d.opts.Name)
		}
		plan = append(plan, fmt.Sprintf("define NAT network %s (%s, gateway %s, bridge %s) and start it", d.opts.Network, d.opts.Subnet, d.opts.Gateway, bridgeName(d.opts.Network)))
	case inactive:
		plan = append(plan, fmt.Sprintf("start network %s", d.opts.Network))
	}
	return plan, nil
}

type objState int

const (
	missing objState = iota
	inactive
	active
)

func (d *Driver) poolState() (objState, error) {
	p, err := d.l.StoragePoolLookupByName(d.opts.Pool)
	if isCode(err, lv.ErrNoStoragePool) {
		return missing, nil
	}
	if err != nil {
		return 0, fmt.Errorf("looking up storage pool %s: %w", d.opts.Pool, err)
	}
	on, err := d.l.StoragePoolIsActive(p)
	if err != nil {
		return 0, fmt.Errorf("reading the state of storage pool %s: %w", d.opts.Pool, err)
	}
	if on == 1 {
		return active, nil
	}
	return inactive, nil
}

func (d *Driver) networkState() (objState, error) {
	n, err := d.l.NetworkLookupByName(d.opts.Network)
	if isCode(err, lv.ErrNoNetwork) {
		return missing, nil
	}
	if err != nil {
		return 0, fmt.Errorf("looking up network %s: %w", d.opts.Network, err)
	}
	on, err := d.l.NetworkIsActive(n)
	if err != nil {
		return 0, fmt.Errorf("reading the state of network %s: %w", d.opts.Network, err)
	}
	if on == 1 {
		return active, nil
	}
	return inactive, nil
}

// PrepareHost defines and starts what PlanHost listed, each set to
// autostart with the host. It never touches other networks.
func (d *Driver) PrepareHost(ctx context.Context) error {
	if err := d.preparePool(ctx); err != nil {
		return err
	}
	if d.opts.Network == "" {
		return nil
	}
	return d.prepareNetwork(ctx)
}

func (d *Driver) preparePool(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p, err := d.l.StoragePoolLookupByName(d.opts.Pool)
	if isCode(err, lv.ErrNoStoragePool) {
		xml, xerr := poolXML(d.opts.Pool, d.opts.poolPath())
		if xerr != nil {
			return xerr
		}
		p, err = d.l.StoragePoolDefineXML(xml, 0)
		if err != nil {
			return fmt.Errorf("defining storage pool %s: %w", d.opts.Pool, err)
		}
		if err := d.l.StoragePoolBuild(p, lv.StoragePoolBuildNew); err != nil && !isCode(err, lv.ErrNoSupport) {
			return fmt.Errorf("building storage pool %s at %s: %w", d.opts.Pool, d.opts.poolPath(), err)
		}
		if err := d.l.StoragePoolSetAutostart(p, 1); err != nil {
			return fmt.Errorf("setting storage pool %s to autostart: %w", d.opts.Pool, err)
		}
	} else if err != nil {
		return fmt.Errorf("looking up storage pool %s: %w", d.opts.Pool, err)
	}
	on, err := d.l.StoragePoolIsActive(p)
	if err != nil {
		return fmt.Errorf("reading the state of storage pool %s: %w", d.opts.Pool, err)
	}
	if on != 1 {
		if err := d.l.StoragePoolCreate(p, 0); err != nil {
			return fmt.Errorf("starting storage pool %s: %w", d.opts.Pool, err)
		}
	}
	return nil
}

func (d *Driver) prepareNetwork(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n, err := d.l.NetworkLookupByName(d.opts.Network)
	if isCode(err, lv.ErrNoNetwork) {
		xml, xerr := networkXML(networkInput{
			Name: d.opts.Network, Bridge: bridgeName(d.opts.Network),
			Subnet: d.opts.Subnet, Gateway: d.opts.Gateway, LocalOnlyDNS: d.opts.LocalOnlyDNS,
		})
		if xerr != nil {
			return xerr
		}
		n, err = d.l.NetworkDefineXML(xml)
		if err != nil {
			return fmt.Errorf("defining network %s: %w", d.opts.Network, err)
		}
		if err := d.l.NetworkSetAutostart(n, 1); err != nil {
			return fmt.Errorf("setting network %s to autostart: %w", d.opts.Network, err)
		}
	} else if err != nil {
		return fmt.Errorf("looking up network %s: %w", d.opts.Network, err)
	}
	on, err := d.l.NetworkIsActive(n)
	if err != nil {
		return fmt.Errorf("reading the state of network %s: %w", d.opts.Network, err)
	}
	if on != 1 {
		if err := d.l.NetworkCreate(n); err != nil {
			return fmt.Errorf("starting network %s: %w", d.opts.Network, err)
		}
	}
	return nil
}

// NetworkBridge is the Linux bridge of the configured network, as libvirt
// reports it; "" for labs on a host bridge.
func (d *Driver) NetworkBridge(ctx context.Context) (string, error) {
	if d.opts.Network == "" {
		return "", ctx.Err()
	}
	n, err := d.l.NetworkLookupByName(d.opts.Network)
	if err != nil {
		return "", fmt.Errorf("looking up network %s: %w", d.opts.Network, err)
	}
	b, err := d.l.NetworkGetBridgeName(n)
	if err != nil {
		return "", fmt.Errorf("reading the bridge of network %s: %w", d.opts.Network, err)
	}
	return b, nil
}

// RemoveNetwork stops and undefines the configured network. Not part of
// hypervisor.Driver: tests and the test bed's cleanup use it.
func (d *Driver) RemoveNetwork(ctx context.Context) error {
	if d.opts.Network == "" {
		return ctx.Err()
	}
	n, err := d.l.NetworkLookupByName(d.opts.Network)
	if isCode(err, lv.ErrNoNetwork) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("looking up network %s: %w", d.opts.Network, err)
	}
	if on, _ := d.l.NetworkIsActive(n); on == 1 {
		if err := d.l.NetworkDestroy(n); err != nil {
			return fmt.Errorf("stopping network %s: %w", d.opts.Network, err)
		}
	}
	if err := d.l.NetworkUndefine(n); err != nil {
		return fmt.Errorf("undefining network %s: %w", d.opts.Network, err)
	}
	return nil
}

// RemovePool stops and undefines the configured pool; it must be empty.
// Tests use it.
func (d *Driver) RemovePool(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p, err := d.l.StoragePoolLookupByName(d.opts.Pool)
	if isCode(err, lv.ErrNoStoragePool) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("looking up storage pool %s: %w", d.opts.Pool, err)
	}
	if on, _ := d.l.StoragePoolIsActive(p); on == 1 {
		if err := d.l.StoragePoolDestroy(p); err != nil {
			return fmt.Errorf("stopping storage pool %s: %w", d.opts.Pool, err)
		}
	}
	// Remove the pool's folder; it must be empty.
	if err := d.l.StoragePoolDelete(p, lv.StoragePoolDeleteNormal); err != nil && !isCode(err, lv.ErrNoSupport) {
		return fmt.Errorf("removing the folder of storage pool %s: %w", d.opts.Pool, err)
	}
	if err := d.l.StoragePoolUndefine(p); err != nil {
		return fmt.Errorf("undefining storage pool %s: %w", d.opts.Pool, err)
	}
	return nil
}

// HostState is what doctor reports of the lab's pool and network on this
// host: "active", "inactive" or "missing" (mgmt up defines a missing one,
// starts an inactive one). Network is "" when the lab uses a bridge.
func (d *Driver) HostState(ctx context.Context) (pool, network string, err error) {
	if err := ctx.Err(); err != nil {
		return "", "", err
	}
	ps, err := d.poolState()
	if err != nil {
		return "", "", err
	}
	if d.opts.Network == "" {
		return ps.String(), "", nil
	}
	ns, err := d.networkState()
	if err != nil {
		return ps.String(), "", err
	}
	return ps.String(), ns.String(), nil
}

func (s objState) String() string {
	switch s {
	case missing:
		return "missing"
	case inactive:
		return "inactive"
	}
	return "active"
}
