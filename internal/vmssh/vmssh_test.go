package vmssh

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/labctl/labctl/internal/testing/sshtest"
)

func TestHostKeyStoredPrivateAndReused(t *testing.T) {
	file := filepath.Join(t.TempDir(), "lab", "mgmt-ssh-host-key")
	k1, err := LoadOrCreateHostKey(file)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(file)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("host key file: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	k2, err := LoadOrCreateHostKey(file)
	if err != nil || !bytes.Equal(k1.PublicKey().Marshal(), k2.PublicKey().Marshal()) {
		t.Fatalf("a second load made another key (%v)", err)
	}
	ci := k1.CloudInit()
	if !strings.HasPrefix(ci.Public, "ssh-ed25519 ") || !bytes.HasPrefix(ci.Private, []byte("-----BEGIN OPENSSH PRIVATE KEY-----")) {
		t.Errorf("cloud-init key: %q", ci.Public)
	}
	if !strings.HasPrefix(k1.Fingerprint(), "SHA256:") {
		t.Errorf("fingerprint %q", k1.Fingerprint())
	}
}

// TestUserAuth reads the private file beside the .pub, and says what to do
// when it is readable by others or has a passphrase.
func TestUserAuth(t *testing.T) {
	t.Setenv("SSH_AUTH_SOCK", "")
	pubFile, pub := sshtest.UserKey(t)
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
	s, err := UserAuth([]string{line}, pubFile)
	if err != nil || len(s) != 1 || !bytes.Equal(s[0].PublicKey().Marshal(), pub.Marshal()) {
		t.Fatalf("UserAuth = %v, %v", s, err)
	}
	priv := strings.TrimSuffix(pubFile, ".pub")
	if err := os.Chmod(priv, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := UserAuth([]string{line}, pubFile); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a private key readable by others: %v", err)
	}
	_, k, _ := ed25519.GenerateKey(rand.Reader)
	block, err := ssh.MarshalPrivateKeyWithPassphrase(k, "", []byte("pass"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(priv, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := UserAuth([]string{line}, pubFile); err == nil || !strings.Contains(err.Error(), "ssh-add") {
		t.Errorf("a key with a passphrase: %v", err)
	}
}
