package mgmt

import (
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/sshtest"
	"github.com/labctl/labctl/internal/vmssh"
)

// K3sOverSSH logs in to the management VM as mgmt up does (the host key
// labctl gave it, the user's key) and runs k3s's install script at the
// pin as root. The guest here is sshtest's sshd on loopback, playing the
// VM's shell; the k3s API it then waits for is one that never answers, so
// the wait's error is what the test sees after the command.
func TestK3sUpgradeOverSSH(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	lab, _, err := config.Load(t.Context(), config.Request{Path: "../../examples/lab.yaml", Explicit: true})
	if err != nil {
		t.Fatal(err)
	}
	lab.Management.SSHPublicKeys, lab.Management.SSHPublicKeyFile = nil, userKeyOf(t).pubFile
	guest := sshtest.Start(t, lab.Management.User, userKey(t))
	kc := kube.NewForConfig(&rest.Config{Host: "https://" + guest.Addr.Addr().String() + ":1", Timeout: time.Second}, "")
	up := K3sOverSSH{Port: guest.Addr.Port()}

	// No host key stored: the VM is not this labctl's, and it does not log in.
	err = up.Upgrade(t.Context(), lab, kc, "v1.35.4+k3s1", time.Second)
	if err == nil || !strings.Contains(err.Error(), "labctl has no SSH host key for it") || guest.Logins() != 0 {
		t.Fatalf("without a host key: %v (logins %d)", err, guest.Logins())
	}
	file, err := MgmtHostKeyPath(lab.Metadata.Name)
	if err != nil {
		t.Fatal(err)
	}
	hk, err := vmssh.LoadOrCreateHostKey(file)
	if err != nil {
		t.Fatal(err)
	}
	guest.SetHostKey(hk.Signer())

	var mu sync.Mutex
	var ran []string
	status, output := uint32(1), "curl: (6) Could not resolve host: raw.githubusercontent.com\n"
	guest.ServeCommands(func(cmd string) (string, uint32) {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, cmd)
		return output, status
	})
	err = up.Upgrade(t.Context(), lab, kc, "v1.35.4+k3s1", time.Second)
	if err == nil || !strings.Contains(err.Error(), "Could not resolve host") || !strings.Contains(err.Error(), "upgrading k3s on 127.0.0.1") {
		t.Errorf("a failing install script: %v", err)
	}
	want := `sudo -n sh -c 'curl -sfL --retry 5 https://raw.githubusercontent.com/k3s-io/k3s/v1.35.4%2Bk3s1/install.sh | INSTALL_K3S_VERSION='\''v1.35.4+k3s1'\'' sh -s - server'`
	if len(ran) != 1 || ran[0] != want {
		t.Errorf("ran %q\nwant %q", ran, want)
	}

	mu.Lock()
	status, output = 0, "[INFO]  Using v1.35.4+k3s1 as release\n[INFO]  systemd: Starting k3s\n"
	mu.Unlock()
	err = up.Upgrade(t.Context(), lab, kc, "v1.35.4+k3s1", 2*time.Second)
	if err == nil || !strings.Contains(err.Error(), "waiting for k3s on https://127.0.0.1:1 to answer at v1.35.4+k3s1") {
		t.Errorf("after the script, the wait: %v", err)
	}
	if err := up.Upgrade(t.Context(), lab, kc, "v1.35.4; reboot", time.Second); err == nil || len(ran) != 2 {
		t.Errorf("a version that is not a k3s release ran: %v %q", err, ran)
	}
}
