package sshkey

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const pub = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHkJ2tN8s0jv4m1Yl0QhRr5o5m3u0T0q9b8mWc3xYk2F owner@laptop"

func write(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAuthorizedReadsInlineThenFile(t *testing.T) {
	f := write(t, "id.pub", "# laptop\n\n"+pub+"\n  ecdsa-sha2-nistp256 AAAAE2VjZHNh x@y  \n")
	got, err := Authorized([]string{"sk-ssh-ed25519@openssh.com AAAAGnNr a@b"}, f)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"sk-ssh-ed25519@openssh.com AAAAGnNr a@b", pub, "ecdsa-sha2-nistp256 AAAAE2VjZHNh x@y"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("keys %q, want %q", got, want)
	}
}

func TestAuthorizedExpandsHome(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".ssh", "id_ed25519.pub"), []byte(pub+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := Authorized(nil, "~/.ssh/id_ed25519.pub"); err != nil || len(got) != 1 || got[0] != pub {
		t.Errorf("~ path: %q, %v", got, err)
	}
}

// Each refusal names the field, the file where there is one, and the fix;
// none repeats a private key.
func TestAuthorizedRefuses(t *testing.T) {
	const private = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjE\n-----END OPENSSH PRIVATE KEY-----\n"
	dir := t.TempDir()
	big := write(t, "big.pub", pub+"\n"+strings.Repeat("#", 70<<10))
	for _, c := range []struct {
		name   string
		inline []string
		file   string
		want   []string
	}{
		{"nothing", nil, "", []string{"management: no SSH public key", "sshPublicKeyFile", "ssh-keygen -t ed25519"}},
		{"missing file", nil, filepath.Join(dir, "nope.pub"), []string{"management.sshPublicKeyFile: ", "nope.pub does not exist", "ssh-keygen"}},
		{"folder", nil, dir, []string{"management.sshPublicKeyFile: ", "is a folder", "id_ed25519.pub"}},
		{"private key file", nil, write(t, "id_ed25519.pub", private), []string{"management.sshPublicKeyFile: ", "id_ed25519.pub holds a private key; name the .pub file"}},
		{"private key inline", []string{"-----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1rZXktdjE"}, "", []string{"management.sshPublicKeys[0] is not an SSH public key but a private key"}},
		{"garbage line", nil, write(t, "g.pub", pub+"\nhello world\n"), []string{"management.sshPublicKeyFile: ", "g.pub line 2 is not an SSH public key"}},
		{"inline without body", []string{pub, "ssh-ed25519"}, "", []string{"management.sshPublicKeys[1] ", "has no key after its type"}},
		{"inline line break", []string{pub + "\n"}, "", []string{"management.sshPublicKeys[0] holds a line break"}},
		{"empty file", nil, write(t, "e.pub", "# nothing\n"), []string{"e.pub holds no public key"}},
		{"huge file", nil, big, []string{"big.pub is larger than 64 KiB"}},
	} {
		_, err := Authorized(c.inline, c.file)
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", c.name, err, w)
			}
		}
		if strings.Contains(err.Error(), "b3BlbnNzaC1rZXktdjE") {
			t.Errorf("%s: the error repeats the private key: %q", c.name, err)
		}
	}
}
