package backup

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/labctl/labctl/internal/ui"
)

// testWorkFactor keeps the tests' scrypt cheap; TestDefaultWorkFactor
// shows a real backup gets age's default.
const testWorkFactor = 10

// caKey stands for the secret material a backup carries.
const caKey = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow-not-a-real-key\n-----END RSA PRIVATE KEY-----\n"

func testArchive() *Archive {
	return &Archive{
		Manifest: Manifest{Format: Format, ID: "0123abcd", Lab: "home", Created: time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC), Labctl: "test",
			Source: "https://127.0.0.1:6443", Clusters: []ClusterRef{{Namespace: "lab1", Name: "lab1"}}, Parts: []string{"autoscalers"}},
		Files: map[string][]byte{
			"clusterctl/lab1/Secret_lab1_lab1-ca.yaml":                  []byte(`{"kind":"Secret","data":{"tls.key":"` + caKey + `"}}`),
			"parts/autoscalers/Deployment_lab1_cluster-autoscaler.yaml": []byte("kind: Deployment\n"),
		},
	}
}

// writeTest writes a into a new file in a temporary folder.
func writeTest(t *testing.T, a *Archive, pass string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "lab.age")
	f, err := createExclusive(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeArchive(f, a, pass, testWorkFactor); err != nil {
		t.Fatal(err)
	}
	return file
}

func TestArchiveRoundTrip(t *testing.T) {
	a := testArchive()
	file := writeTest(t, a, "correct horse")
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("backup mode %v, want 0600", fi.Mode().Perm())
	}
	raw, _ := os.ReadFile(file)
	if !bytes.HasPrefix(raw, []byte("age-encryption.org/v1\n-> scrypt ")) {
		t.Errorf("backup does not start as an age file with a passphrase: %q", raw[:min(len(raw), 40)])
	}
	for _, plain := range []string{"MIIEow-not-a-real-key", "cluster-autoscaler", "manifest.json", "lab1"} {
		if bytes.Contains(raw, []byte(plain)) {
			t.Errorf("the backup file holds %q in the clear", plain)
		}
	}
	got, err := readArchive(file, "correct horse")
	if err != nil {
		t.Fatal(err)
	}
	if got.Manifest.ID != a.Manifest.ID || got.Manifest.Lab != "home" || !got.Manifest.Created.Equal(a.Manifest.Created) || len(got.Manifest.Clusters) != 1 {
		t.Errorf("manifest = %+v, want %+v", got.Manifest, a.Manifest)
	}
	if len(got.Files) != len(a.Files) {
		t.Fatalf("files = %d, want %d", len(got.Files), len(a.Files))
	}
	for n, data := range a.Files {
		if !bytes.Equal(got.Files[n], data) {
			t.Errorf("%s = %q, want %q", n, got.Files[n], data)
		}
	}
	if under := got.Under("parts/autoscalers"); len(under) != 1 || under["Deployment_lab1_cluster-autoscaler.yaml"] == nil {
		t.Errorf("Under(parts/autoscalers) = %v", under)
	}
}

func TestNeverOverwrites(t *testing.T) {
	file := filepath.Join(t.TempDir(), "lab.age")
	if err := os.WriteFile(file, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := createExclusive(file)
	if err == nil || !strings.Contains(err.Error(), "already exists") || !strings.Contains(err.Error(), file) {
		t.Fatalf("createExclusive over a file: %v, want an error naming it", err)
	}
	if got, _ := os.ReadFile(file); string(got) != "precious" {
		t.Errorf("the existing file changed: %q", got)
	}
	// A dangling symlink is a taken name too: O_EXCL does not follow it.
	link := filepath.Join(t.TempDir(), "link.age")
	target := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, err := createExclusive(link); err == nil {
		t.Error("createExclusive through a symlink succeeded")
	}
	if _, err := os.Stat(target); err == nil {
		t.Error("the symlink's target was created")
	}
}

// TestDefaultWorkFactor: with no work factor set, the file's scrypt stanza
// has age's default 2^18 (about a second per guess on a modern machine).
func TestDefaultWorkFactor(t *testing.T) {
	var buf bytes.Buffer
	r, err := age.NewScryptRecipient("pass")
	if err != nil {
		t.Fatal(err)
	}
	if err := encodeArchive(&buf, testArchive(), r); err != nil {
		t.Fatal(err)
	}
	hdr := strings.SplitN(buf.String(), "\n", 3)[1]
	if f := strings.Fields(hdr); len(f) != 4 || f[1] != "scrypt" || f[3] != "18" {
		t.Errorf("recipient stanza %q, want scrypt with work factor 18", hdr)
	}
}

func TestReadArchiveErrors(t *testing.T) {
	good := writeTest(t, testArchive(), "correct horse")
	raw, _ := os.ReadFile(good)
	dir := t.TempDir()
	put := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// An age file to an X25519 key, and one with a passphrase that holds
	// something else than a backup.
	id, _ := age.GenerateX25519Identity()
	var toKey, notBackup bytes.Buffer
	w, _ := age.Encrypt(&toKey, id.Recipient())
	w.Write([]byte("hello"))
	w.Close()
	sr, _ := age.NewScryptRecipient("correct horse")
	sr.SetWorkFactor(testWorkFactor)
	w, _ = age.Encrypt(&notBackup, sr)
	w.Write([]byte("just some notes\n"))
	w.Close()

	for _, tc := range []struct {
		name, file, pass, want string
		is                     error
	}{
		{"wrong passphrase", good, "battery staple", "wrong passphrase", ErrWrongPassphrase},
		{"truncated in the payload", put("half.age", raw[:len(raw)*2/3]), "correct horse", "is truncated or damaged", nil},
		{"last byte cut", put("short.age", raw[:len(raw)-1]), "correct horse", "is truncated or damaged", nil},
		{"truncated in the header", put("head.age", raw[:40]), "correct horse", "is truncated or damaged", nil},
		{"a flipped byte", put("flip.age", flip(raw, len(raw)-10)), "correct horse", "is truncated or damaged", nil},
		{"empty", put("empty.age", nil), "correct horse", "is empty: not a labctl backup", nil},
		{"a YAML file", put("lab.yaml", []byte("apiVersion: labctl.dev/v1alpha1\nkind: Lab\n")), "correct horse", "is not a labctl backup: it is not an age-encrypted file", nil},
		{"age to a key", put("key.age", toKey.Bytes()), "correct horse", "encrypted to age keys (X25519), not with a passphrase", nil},
		{"age, not a backup", put("notes.age", notBackup.Bytes()), "correct horse", "decrypts, but is not a labctl backup", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readArchive(tc.file, tc.pass)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.file) {
				t.Errorf("error %q, want one naming %s and saying %q", err, tc.file, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
			if strings.Contains(err.Error(), tc.pass) {
				t.Errorf("error %q holds the passphrase", err)
			}
		})
	}
}

func flip(b []byte, i int) []byte {
	out := bytes.Clone(b)
	out[i] ^= 0xff
	return out
}

func TestFormatOfAnotherVersion(t *testing.T) {
	a := testArchive()
	a.Manifest.Format = "labctl.dev/backup/v9"
	file := writeTest(t, a, "p")
	_, err := readArchive(file, "p")
	if err == nil || !strings.Contains(err.Error(), `format "labctl.dev/backup/v9"`) {
		t.Fatalf("error %v, want one naming the other format", err)
	}
}

func TestPassphrase(t *testing.T) {
	tty := func(in string) (*ui.IO, *bytes.Buffer) {
		io, stdin, _, errb := ui.Test()
		stdin.WriteString(in)
		io.InTTY, io.ErrTTY = true, true
		return io, errb
	}
	t.Run("from the environment", func(t *testing.T) {
		t.Setenv(EnvPassphrase, "from env")
		io, errb := tty("")
		p, err := Passphrase(io, "lab.age", true)
		if err != nil || p != "from env" {
			t.Fatalf("Passphrase = %q, %v", p, err)
		}
		if errb.Len() != 0 {
			t.Errorf("asked although the environment holds it: %q", errb)
		}
	})
	t.Run("set but empty", func(t *testing.T) {
		t.Setenv(EnvPassphrase, "")
		io, _ := tty("typed\n")
		if _, err := Passphrase(io, "lab.age", false); err == nil || !strings.Contains(err.Error(), EnvPassphrase+" is set but empty") {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("typed twice", func(t *testing.T) {
		os.Unsetenv(EnvPassphrase)
		io, errb := tty("s3cret words\ns3cret words\n")
		p, err := Passphrase(io, "lab.age", true)
		if err != nil || p != "s3cret words" {
			t.Fatalf("Passphrase = %q, %v", p, err)
		}
		if !strings.Contains(errb.String(), "Passphrase for lab.age:") || !strings.Contains(errb.String(), "again") {
			t.Errorf("prompts: %q", errb)
		}
		if strings.Contains(errb.String(), "s3cret") {
			t.Errorf("the passphrase was echoed: %q", errb)
		}
	})
	t.Run("typed differently", func(t *testing.T) {
		io, _ := tty("one\ntwo\n")
		if _, err := Passphrase(io, "lab.age", true); err == nil || !strings.Contains(err.Error(), "differ") {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("empty", func(t *testing.T) {
		io, _ := tty("\n")
		if _, err := Passphrase(io, "lab.age", false); err == nil || !strings.Contains(err.Error(), "empty") {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("no terminal", func(t *testing.T) {
		io, stdin, _, _ := ui.Test()
		stdin.WriteString("typed\n")
		_, err := Passphrase(io, "lab.age", false)
		if err == nil || !strings.Contains(err.Error(), "set "+EnvPassphrase) {
			t.Fatalf("error %v, want one naming %s", err, EnvPassphrase)
		}
	})
}
