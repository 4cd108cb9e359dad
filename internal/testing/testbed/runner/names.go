package runner

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
)

// The runner's stand-in for cluster DNS, for the processes that dial
// Services by name (Image.Hosts): Kamaji's tenant client dials
// https://<tcp>.<namespace>.svc:<port> (internal/utilities/tenant_client.go
// at e51909f), and without that name the kubeadm phases inside the tenant
// fail while the TenantControlPlane still reports Ready.
//
// Such a process runs in a mount namespace of its own (util-linux's
// unshare, as root), where the runner's hosts file is bind-mounted over
// /etc/hosts: the machine's /etc/hosts and its resolver are left as they
// are, and only that process sees the names. Each names 127.0.0.1 for a
// Service whose process listens on the Service's own ports
// (servesItsPorts), the names a pod's resolver would answer:
// <service>.<namespace>.svc and <service>.<namespace>.svc.cluster.local.
// The file is rewritten in place (a bind mount holds the inode) as
// Services come and go; Go's resolver, which Kamaji (CGO_ENABLED=0) uses,
// reads /etc/hosts again when it changed, within 5 s.

// hostsFile is where the runner keeps the hosts file.
func (r *Runner) hostsFile() string { return filepath.Join(r.dir, "hosts") }

// writeHosts writes the hosts file naming these Services, when it
// changed.
func (r *Runner) writeHosts(services []string) {
	slices.Sort(services)
	var b bytes.Buffer
	b.WriteString("# labctl test bed runner: the box's Services, on loopback\n127.0.0.1 localhost\n::1 localhost ip6-localhost\n")
	for _, s := range services {
		fmt.Fprintf(&b, "127.0.0.1 %s %s.cluster.local\n", s, s)
	}
	path := r.hostsFile()
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b.Bytes()) {
		return
	}
	// O_TRUNC keeps the inode that the bind mounts hold; 0644 as
	// /etc/hosts is, as the process may drop privileges.
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		r.logf("writing the hosts file: %v", err)
		return
	}
	if _, err := f.Write(b.Bytes()); err != nil {
		r.logf("writing the hosts file: %v", err)
	}
	f.Close()
}

// withHosts wraps cmd so that it runs with the runner's hosts file as its
// /etc/hosts: unshare --mount (a private mount namespace), a bind mount,
// then exec of the binary, so the process's pid is the binary's.
func (r *Runner) withHosts(cmd *exec.Cmd) (*exec.Cmd, error) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return nil, fmt.Errorf("%s dials Services by name and needs util-linux's unshare for an /etc/hosts of its own: %w", filepath.Base(cmd.Path), err)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%s dials Services by name: the runner gives it an /etc/hosts of its own in a mount namespace, which needs root", filepath.Base(cmd.Path))
	}
	if _, err := os.Stat(r.hostsFile()); err != nil {
		r.writeHosts(nil)
	}
	args := append([]string{unshare, "--mount", "--propagation", "private", "--", sh, "-c", `mount --bind "$0" /etc/hosts && exec "$@"`, r.hostsFile()}, cmd.Args...)
	return &exec.Cmd{Path: unshare, Args: args, Dir: cmd.Dir, Env: cmd.Env}, nil
}
