package mgmt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/sshkey"
	"github.com/labctl/labctl/internal/testing/sshtest"
	"github.com/labctl/labctl/internal/testing/sudotest"
	"github.com/labctl/labctl/internal/vmssh"
)

// TestUpUnderSudo is 'sudo labctl mgmt up' typed by alice: the SSH key
// lab.yaml names as ~/.ssh/id_ed25519.pub is alice's (root has none), and
// what mgmt up stores goes into alice's ~/.config/labctl, where her next
// command (the README's 'export KUBECONFIG=~/.config/labctl/local/
// mgmt.kubeconfig') looks.
func TestUpUnderSudo(t *testing.T) {
	home := t.TempDir()
	pub, key := sshtest.UserKey(t)
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{pub, strings.TrimSuffix(pub, ".pub")} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(home, ".ssh", filepath.Base(f)), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sudotest.Fake(t, "alice", 4242, 4343, home)
	t.Setenv("SSH_AUTH_SOCK", "") // sudo's env_reset drops it

	m := config.Management{SSHPublicKeyFile: "~/.ssh/id_ed25519.pub"}
	keys, err := sshkey.Authorized(m.SSHPublicKeys, m.SSHPublicKeyFile)
	if err != nil {
		t.Fatalf("under sudo, the invoking user's key is not found: %v", err)
	}
	if len(keys) != 1 || strings.TrimSpace(keys[0]) != strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key))) {
		t.Errorf("keys = %q, want alice's", keys)
	}
	signers, err := vmssh.UserAuth(keys, m.SSHPublicKeyFile)
	if err != nil || len(signers) != 1 {
		t.Fatalf("the private half beside alice's key: %d signers, %v", len(signers), err)
	}
	hk, err := MgmtHostKeyPath("local")
	if err != nil || !strings.HasPrefix(hk, filepath.Join(home, ".config", "labctl", "local")+"/") {
		t.Errorf("host key stored at %s (%v), want under alice's ~/.config/labctl/local", hk, err)
	}
}
