package mgmt

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/labctl/labctl/internal/cloudinit"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/sshkey"
	"github.com/labctl/labctl/internal/step"
	"github.com/labctl/labctl/internal/ui"
	"github.com/labctl/labctl/internal/versions"
	"github.com/labctl/labctl/internal/vmssh"
)

// K3sOverSSH upgrades k3s on the management VM labctl made: it logs in as
// 'mgmt up' does (the host key labctl gave the VM, the user's key), re-runs
// k3s's install script at the pinned tag, and waits until the API answers
// at that version through the stored kubeconfig, and every node is Ready
// at it. k3s keeps its certificates across the restart, so the stored
// kubeconfig goes on working; the wait proves it.
//
// labctl does this over SSH rather than with Rancher's
// system-upgrade-controller because it needs nothing more on the VM: the
// controller would be one more component to pin and install, and it
// upgrades by a Plan that drains the (single) node it runs on.
type K3sOverSSH struct {
	// Port is sshd's (22); tests point it at their sshd.
	Port uint16
}

// Upgrade implements K3sUpgrader.
func (k K3sOverSSH) Upgrade(ctx context.Context, lab *config.Lab, kc *kube.Client, to string, timeout time.Duration) error {
	cmd, err := cloudinit.K3sUpgradeCommand(to)
	if err != nil {
		return err
	}
	t, err := k.target(lab, kc)
	if err != nil {
		return err
	}
	step.Progress(ctx, "running k3s's install script at %s on %s", to, t.Addr)
	if _, err := vmssh.Run(ctx, t, cmd, func(l string) { step.Progress(ctx, "%s", l) }); err != nil {
		return fmt.Errorf("upgrading k3s on %s: %w", t.Addr, err)
	}
	return WaitK3s(ctx, kc, to, timeout)
}

func (k K3sOverSSH) target(lab *config.Lab, kc *kube.Client) (vmssh.Target, error) {
	port := k.Port
	if port == 0 {
		port = 22
	}
	u, err := url.Parse(kc.Host())
	if err != nil {
		return vmssh.Target{}, fmt.Errorf("the management cluster's address %q: %w", kc.Host(), err)
	}
	host := u.Hostname()
	addr, err := netip.ParseAddr(host)
	if err != nil {
		ips, lerr := net.DefaultResolver.LookupNetIP(context.Background(), "ip", host)
		if lerr != nil || len(ips) == 0 {
			return vmssh.Target{}, fmt.Errorf("the management cluster's address %s: %w", host, errors.Join(err, lerr))
		}
		addr = ips[0]
	}
	file, err := MgmtHostKeyPath(lab.Metadata.Name)
	if err != nil {
		return vmssh.Target{}, err
	}
	hk, err := vmssh.LoadHostKey(file)
	if errors.Is(err, fs.ErrNotExist) {
		return vmssh.Target{}, fmt.Errorf("k3s on %s: labctl has no SSH host key for it (%s), so this VM was not made by this labctl's 'mgmt up' and labctl will not log in to it; upgrade k3s there yourself (re-run its install script with INSTALL_K3S_VERSION=%s), then run 'labctl mgmt upgrade' again", addr, file, versions.MustGet().K3s)
	}
	if err != nil {
		return vmssh.Target{}, err
	}
	keys, err := sshkey.Authorized(lab.Management.SSHPublicKeys, lab.Management.SSHPublicKeyFile)
	if err != nil {
		return vmssh.Target{}, err
	}
	auth, err := vmssh.UserAuth(keys, lab.Management.SSHPublicKeyFile)
	if err != nil {
		return vmssh.Target{}, err
	}
	return vmssh.Target{Addr: netip.AddrPortFrom(addr.Unmap(), port), User: lab.Management.User, HostKey: hk.PublicKey(), Auth: auth}, nil
}

var nodeGVK = schema.GroupVersionKind{Version: "v1", Kind: "Node"}

// WaitK3s waits until the API server behind kc answers at version to and
// every node is Ready with a kubelet at to. The API goes away while k3s
// restarts: errors until then are progress, not failures.
func WaitK3s(ctx context.Context, kc *kube.Client, to string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	began := time.Now()
	for {
		now, done := k3sAt(ctx, kc, to)
		if done {
			return nil
		}
		step.Progress(ctx, "waiting for k3s %s: %s (%s)", to, now, ui.Duration(time.Since(began).Truncate(time.Second)))
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for k3s on %s to answer at %s: %w (last: %s)", kc.Host(), to, ctx.Err(), now)
		case <-time.After(2 * time.Second):
		}
	}
}

func k3sAt(ctx context.Context, kc *kube.Client, to string) (string, bool) {
	v, err := kc.ServerVersion(ctx)
	if err != nil {
		return "the API does not answer yet (" + err.Error() + ")", false
	}
	if v.GitVersion != to {
		return "the API answers at " + v.GitVersion, false
	}
	nodes, err := kc.List(ctx, nodeGVK, "", "")
	if err != nil {
		return "listing nodes: " + err.Error(), false
	}
	var behind []string
	for _, n := range nodes {
		kv, _, _ := unstructured.NestedString(n.Object, "status", "nodeInfo", "kubeletVersion")
		ready, _ := kube.CondTrue(&n, "Ready")
		if kv != to || !ready {
			behind = append(behind, fmt.Sprintf("node %s (kubelet %s, Ready %v)", n.GetName(), kv, ready))
		}
	}
	if len(behind) > 0 {
		return strings.Join(behind, ", "), false
	}
	return "", true
}

// k3sItem is the plan line of k3s: what the API server reports.
func (in *installer) k3sItem() UpgradeItem {
	to := versions.MustGet().K3s
	it := UpgradeItem{Component: "k3s", From: in.kver, To: to,
		Does:       "re-runs k3s's install script at " + to + " over SSH on the management VM; k3s restarts in place with its datastore and certificates (the stored kubeconfig keeps working)",
		Interrupts: "the management API and every controller on it for about a minute; workload clusters keep serving, their autoscalers pause"}
	switch {
	case !strings.Contains(in.kver, "+k3s"):
		it.Action = ActionSkip
		it.Reason = "the management cluster is not k3s (it reports " + in.kver + "); labctl upgrades only the k3s its 'mgmt up' installs"
	case in.kver == to:
		it.Action = ActionNone
	default:
		it.Action = ActionUpgrade
	}
	return it
}

// k3sSteps are the k3s step when the plan moves k3s.
func (in *installer) k3sSteps(p *UpgradePlan, k K3sUpgrader) []step.Step {
	for _, it := range p.Items {
		if it.Component != "k3s" || it.Action != ActionUpgrade {
			continue
		}
		to := it.To
		return []step.Step{{
			Name: "k3s " + to,
			Plan: func(ctx context.Context) ([]string, error) {
				if now, done := k3sAt(ctx, in.kc, to); !done {
					return []string{"upgrade k3s to " + to + " (" + now + ")"}, nil
				}
				return nil, nil
			},
			Apply: func(ctx context.Context) error { return k.Upgrade(ctx, in.o.Lab, in.kc, to, in.o.Timeout) },
		}}
	}
	return nil
}
