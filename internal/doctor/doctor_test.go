package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/ui"
)

const secretValue = "0b1e2f3a-not-to-be-printed-7c9d"

// labFile writes examples/lab.yaml to a temp folder, with edits applied
// as old/new pairs, and returns its path.
func labFile(t *testing.T, edits ...string) string {
	t.Helper()
	data, err := os.ReadFile("../../examples/lab.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for i := 0; i+1 < len(edits); i += 2 {
		if !strings.Contains(s, edits[i]) {
			t.Fatalf("examples/lab.yaml no longer contains %q; update the test", edits[i])
		}
		s = strings.Replace(s, edits[i], edits[i+1], 1)
	}
	p := filepath.Join(t.TempDir(), "lab.yaml")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// home gives the test its own HOME and XDG_CONFIG_HOME, with an SSH public
// key at ~/.ssh/id_ed25519.pub as the example lab expects.
func home(t *testing.T) string {
	t.Helper()
	h := t.TempDir()
	t.Setenv("HOME", h)
	t.Setenv("XDG_CONFIG_HOME", "")
	writeFile(t, filepath.Join(h, ".ssh", "id_ed25519.pub"), "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBz labctl@test\n", 0o644)
	return h
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	// A fresh file each time: the last mode may not let this user write
	// (0400 refuses anyone but root).
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // umask aside
		t.Fatal(err)
	}
}

func run(t *testing.T, o Options) (r *Report, err error, stdout string) {
	t.Helper()
	io, _, out, _ := ui.Test()
	o.IO = io
	// These tests use the owner's lab, whose PVE is not here: no network.
	// proxmox_test.go checks the hypervisors against the fake PVE.
	o.SkipHypervisors = true
	r, err = Run(context.Background(), o)
	return r, err, out.String()
}

func check(t *testing.T, r *Report, name string) Check {
	t.Helper()
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %q in %+v", name, r.Checks)
	return Check{}
}

// secretOf is doctor's check of the token secret ref of Proxmox token tokenID.
func secretOf(ref config.SecretRef, tokenID string) (Status, string) {
	return checkSecret(config.Hypervisor{Name: "pve", Proxmox: &config.Proxmox{TokenID: tokenID, TokenSecret: ref}})
}

func TestSecretEnv(t *testing.T) {
	ref := config.SecretRef{Env: "LABCTL_TEST_SECRET"}
	os.Unsetenv(ref.Env)
	if st, d := secretOf(ref, "root@pam!labctl"); st != Fail || !strings.Contains(d, "LABCTL_TEST_SECRET is not set") || !strings.Contains(d, "root@pam!labctl") {
		t.Errorf("unset: %s %q", st, d)
	}
	t.Setenv(ref.Env, "  ")
	if st, d := secretOf(ref, "x"); st != Fail || !strings.Contains(d, "empty") {
		t.Errorf("blank: %s %q", st, d)
	}
	t.Setenv(ref.Env, secretValue)
	st, d := secretOf(ref, "x")
	if st != OK || strings.Contains(d, secretValue) {
		t.Errorf("set: %s %q", st, d)
	}
}

func TestSecretFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "pve-token")
	ref := config.SecretRef{File: p}

	if st, d := secretOf(ref, "x"); st != Fail || !strings.Contains(d, "does not exist") || !strings.Contains(d, p) {
		t.Errorf("missing: %s %q", st, d)
	}
	writeFile(t, p, secretValue+"\n", 0o644)
	if st, d := secretOf(ref, "x"); st != Warn || !strings.Contains(d, "0644") || !strings.Contains(d, "chmod 600 "+p) {
		t.Errorf("0644: %s %q", st, d)
	}
	writeFile(t, p, secretValue+"\n", 0o640)
	if st, _ := secretOf(ref, "x"); st != Warn {
		t.Errorf("0640: %s, want warn (group-readable)", st)
	}
	writeFile(t, p, secretValue+"\n", 0o600)
	st, d := secretOf(ref, "x")
	if st != OK || strings.Contains(d, secretValue) {
		t.Errorf("0600: %s %q", st, d)
	}
	writeFile(t, p, secretValue+"\n", 0o400)
	if st, _ := secretOf(ref, "x"); st != OK {
		t.Errorf("0400: %s, want ok", st)
	}
	writeFile(t, p, "", 0o600)
	if st, d := secretOf(ref, "x"); st != Fail || !strings.Contains(d, "empty") {
		t.Errorf("empty: %s %q", st, d)
	}
	if st, d := secretOf(config.SecretRef{File: dir}, "x"); st != Fail || !strings.Contains(d, "folder") {
		t.Errorf("folder: %s %q", st, d)
	}
	if os.Geteuid() != 0 { // root reads anything
		writeFile(t, p, secretValue, 0o000)
		if st, d := secretOf(ref, "x"); st != Fail || !strings.Contains(d, "cannot be read") {
			t.Errorf("unreadable: %s %q", st, d)
		}
	}
}

func TestSecretFileTilde(t *testing.T) {
	h := home(t)
	writeFile(t, filepath.Join(h, ".config", "labctl", "pve-token"), secretValue, 0o600)
	st, d := secretOf(config.SecretRef{File: "~/.config/labctl/pve-token"}, "x")
	if st != OK || !strings.Contains(d, h) {
		t.Errorf("~ path: %s %q", st, d)
	}
}

func TestSSHKey(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "id.pub")
	m := config.Management{SSHPublicKeyFile: p}
	if st, d := checkSSHKey(m); st != Fail || !strings.Contains(d, "does not exist") || !strings.Contains(d, "management.sshPublicKeyFile") {
		t.Errorf("missing: %s %q", st, d)
	}
	writeFile(t, p, "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----\n", 0o600)
	st, d := checkSSHKey(m)
	if st != Fail || !strings.Contains(d, "private key") || strings.Contains(d, "b3Blbn") {
		t.Errorf("private: %s %q", st, d)
	}
	writeFile(t, p, "hello\n", 0o644)
	if st, d := checkSSHKey(m); st != Fail || !strings.Contains(d, "line 1 is not an SSH public key") {
		t.Errorf("garbage: %s %q", st, d)
	}
	writeFile(t, p, "ecdsa-sha2-nistp256 AAAAE2VjZHNh x@y\n", 0o644)
	if st, d := checkSSHKey(m); st != OK || !strings.Contains(d, "ecdsa-sha2-nistp256") {
		t.Errorf("ecdsa: %s %q", st, d)
	}
	if st, d := checkSSHKey(config.Management{SSHPublicKeys: []string{"ssh-ed25519 AAAA"}}); st != OK || !strings.Contains(d, "1 inline") {
		t.Errorf("inline: %s %q", st, d)
	}
	// Stricter since the three readers became one: doctor used to skip an
	// empty list and pass a private key given inline, both of which
	// 'mgmt up' refuses.
	if st, d := checkSSHKey(config.Management{}); st != Fail || !strings.Contains(d, "no SSH public key") || !strings.Contains(d, "sshPublicKeyFile") {
		t.Errorf("no key at all: %s %q", st, d)
	}
	inlinePrivate := config.Management{SSHPublicKeys: []string{"-----BEGIN OPENSSH PRIVATE KEY----- b3Blbn"}}
	if st, d := checkSSHKey(inlinePrivate); st != Fail || !strings.Contains(d, "management.sshPublicKeys[0] is not an SSH public key but a private key") || strings.Contains(d, "b3Blbn") {
		t.Errorf("inline private key: %s %q", st, d)
	}
}

func TestDoctorExampleLab(t *testing.T) {
	home(t)
	t.Setenv("PVE_TOKEN_SECRET", secretValue)
	path := labFile(t)
	for _, format := range []string{"text", "json", "yaml"} {
		t.Run(format, func(t *testing.T) {
			r, err, out := run(t, Options{Output: format, LoadLab: load(config.Request{Path: path, Explicit: true})})
			if err != nil {
				t.Fatalf("Run: %v\n%s", err, out)
			}
			if strings.Contains(out, secretValue) {
				t.Fatalf("the token secret appears in the output:\n%s", out)
			}
			if c := check(t, r, "config"); c.Status != OK || !strings.Contains(c.Detail, path) || !strings.Contains(c.Detail, `"home"`) {
				t.Errorf("config: %+v", c)
			}
			if c := check(t, r, "proxmox pve token secret"); c.Status != OK || c.Detail != "env PVE_TOKEN_SECRET is set" {
				t.Errorf("secret: %+v", c)
			}
			if c := check(t, r, "ssh public key"); c.Status != OK {
				t.Errorf("ssh: %+v", c)
			}
			if c := check(t, r, "management cluster"); c.Status != Warn || !strings.Contains(c.Detail, "no management cluster yet: run labctl mgmt up") {
				t.Errorf("mgmt: %+v", c)
			}
			if r.Management != nil || r.Failed != 0 || r.Warnings != 1 {
				t.Errorf("report: %+v", r)
			}
			switch format {
			case "text":
				if !strings.HasPrefix(out, "CHECK") || !strings.Contains(out, "STATUS") || !strings.Contains(out, "DETAIL") {
					t.Errorf("no table header:\n%s", out)
				}
			case "json":
				var got Report
				if err := json.Unmarshal([]byte(out), &got); err != nil {
					t.Fatalf("not JSON: %v\n%s", err, out)
				}
				if got.Config != path || got.Lab != "home" || len(got.Checks) != len(r.Checks) {
					t.Errorf("JSON report: %+v", got)
				}
			}
		})
	}
}

func TestDoctorFailsExit(t *testing.T) {
	home(t)
	os.Unsetenv("PVE_TOKEN_SECRET")
	secret := filepath.Join(t.TempDir(), "token")
	writeFile(t, secret, secretValue, 0o644)
	path := labFile(t, "env: PVE_TOKEN_SECRET", "file: "+secret)
	r, err, out := run(t, Options{Output: "json", LoadLab: load(config.Request{Path: path, Explicit: true})})
	if c := check(t, r, "proxmox pve token secret"); c.Status != Warn || !strings.Contains(c.Detail, "0644") {
		t.Errorf("secret: %+v", c)
	}
	if err != nil || strings.Contains(out, secretValue) {
		t.Errorf("a warning alone must not fail: %v; output:\n%s", err, out)
	}

	// Without the key file the doctor fails.
	os.Remove(filepath.Join(os.Getenv("HOME"), ".ssh", "id_ed25519.pub"))
	r, err, _ = run(t, Options{Output: "text", LoadLab: load(config.Request{Path: path, Explicit: true})})
	if !errors.Is(err, ErrFailed) || r.Failed != 1 {
		t.Errorf("missing key: err %v, failed %d", err, r.Failed)
	}
}

func TestDoctorBadConfig(t *testing.T) {
	home(t)
	path := labFile(t, "max: 5", "max: -1")
	r, err, out := run(t, Options{Output: "text", LoadLab: load(config.Request{Path: path, Explicit: true})})
	if !errors.Is(err, ErrFailed) {
		t.Fatalf("err = %v", err)
	}
	c := check(t, r, "config")
	if c.Status != Fail || !strings.Contains(c.Detail, path) || !strings.Contains(c.Detail, "workers.max") {
		t.Errorf("config: %+v", c)
	}
	if strings.Count(out, "\n") != len(r.Checks)+1 {
		t.Errorf("every check is one table line:\n%s", out)
	}
	if c := check(t, r, "management cluster"); c.Status != Warn || !strings.Contains(c.Detail, "--kubeconfig") {
		t.Errorf("mgmt: %+v", c)
	}
}

func TestDoctorMissingConfigFile(t *testing.T) {
	home(t)
	path := filepath.Join(t.TempDir(), "absent.yaml")
	r, err, _ := run(t, Options{Output: "json", LoadLab: load(config.Request{Path: path, Explicit: true})})
	if !errors.Is(err, ErrFailed) || r.Config != path || !strings.Contains(check(t, r, "config").Detail, "does not exist") {
		t.Errorf("err %v, report %+v", err, r)
	}
}

func TestDoctorBuiltInLab(t *testing.T) {
	home(t)
	t.Chdir(t.TempDir()) // no ./lab.yaml here
	r, _, _ := run(t, Options{Output: "json", LoadLab: load(config.Request{Path: "./lab.yaml"})})
	if r.Config != "built-in local-kvm example" || check(t, r, "config").Status != OK {
		t.Errorf("report: %+v", r)
	}
	for _, c := range r.Checks {
		if strings.HasPrefix(c.Name, "proxmox") {
			t.Errorf("the local-kvm lab has no Proxmox, yet: %+v", c)
		}
	}
}

func TestDoctorKubeconfig(t *testing.T) {
	h := home(t)
	t.Setenv("PVE_TOKEN_SECRET", secretValue)
	path := labFile(t)
	req := config.Request{Path: path, Explicit: true}

	// A named kubeconfig that does not exist fails and names the file.
	missing := filepath.Join(h, "nope.kubeconfig")
	r, err, _ := run(t, Options{Output: "json", LoadLab: load(req), Kubeconfig: missing})
	if c := check(t, r, "management cluster"); !errors.Is(err, ErrFailed) || c.Status != Fail || !strings.Contains(c.Detail, missing) {
		t.Errorf("missing --kubeconfig: %v %+v", err, c)
	}

	// The stored kubeconfig is found under XDG_CONFIG_HOME; a server that
	// does not answer fails the check.
	xdg := filepath.Join(h, "xdg")
	t.Setenv("XDG_CONFIG_HOME", xdg)
	stored := filepath.Join(xdg, "labctl", "home", "mgmt.kubeconfig")
	writeFile(t, stored, `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, 0o600)
	r, err, _ = run(t, Options{Output: "json", LoadLab: load(req)})
	c := check(t, r, "management cluster")
	if !errors.Is(err, ErrFailed) || c.Status != Fail || !strings.Contains(c.Detail, "127.0.0.1:1") {
		t.Errorf("unreachable: %v %+v", err, c)
	}
	if r.Management == nil || !r.Management.Stored || r.Management.Kubeconfig != stored || r.Management.Reachable {
		t.Errorf("management: %+v", r.Management)
	}
}

// load is the command factory's Lab for one config request.
func load(req config.Request) func(context.Context) (*config.Lab, config.Source, error) {
	return func(ctx context.Context) (*config.Lab, config.Source, error) { return config.Load(ctx, req) }
}
