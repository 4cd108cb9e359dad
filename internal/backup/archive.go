package backup

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"filippo.io/age"

	"github.com/labctl/labctl/internal/userhome"
)

// The archive inside the age file: a gzipped tar whose first entry is the
// manifest, then clusterctl's files under clusterctl/<namespace>/ and each
// part's under parts/<part>/.
const (
	// Format names this layout; a reader refuses any other.
	Format       = "labctl.dev/backup/v1"
	manifestName = "manifest.json"
	clusterctlTo = "clusterctl"
	partsTo      = "parts"
	// ageMagic starts every binary age file (age-encryption.org/v1).
	ageMagic = "age-encryption.org/"
	// maxPlain bounds what a restore reads into memory: a lab's objects
	// are a few megabytes; a file claiming more is not a backup of one.
	maxPlain = 1 << 30
)

// Manifest says what a backup holds and where it came from.
type Manifest struct {
	Format string `json:"format"`
	// ID is random per backup: a restore marks the Clusters it makes with
	// it, so a re-run of the same restore resumes instead of refusing.
	ID      string    `json:"id"`
	Lab     string    `json:"lab"`
	Created time.Time `json:"created"`
	// Labctl is the version of labctl that wrote it.
	Labctl string `json:"labctl"`
	// Source is the API server the backup was taken from.
	Source   string       `json:"source"`
	Clusters []ClusterRef `json:"clusters"`
	// Parts are the parts the backup holds, by name (Part.Name).
	Parts []string `json:"parts"`
	// SkippedTenants are the Kamaji tenant clusters left out (backup
	// --skip-tenants): their control planes' data is not in a backup.
	SkippedTenants []ClusterRef `json:"skippedTenants,omitempty"`
}

// ClusterRef is one Cluster API Cluster.
type ClusterRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

func (c ClusterRef) String() string { return c.Namespace + "/" + c.Name }

// Archive is a backup in memory: the manifest and every file by its path
// in the archive.
type Archive struct {
	Manifest Manifest
	Files    map[string][]byte
}

// Under returns the files below dir (a path in the archive), by their
// path relative to it.
func (a *Archive) Under(dir string) map[string][]byte {
	out := map[string][]byte{}
	prefix := dir + "/"
	for p, data := range a.Files {
		if rel, ok := strings.CutPrefix(p, prefix); ok {
			out[rel] = data
		}
	}
	return out
}

// ErrWrongPassphrase means the passphrase does not open the backup.
var ErrWrongPassphrase = errors.New("wrong passphrase")

// createExclusive makes file for a new backup, mode 0600, and fails when
// anything exists at that path: a backup never replaces a file. It is made
// before the work starts, so a name already taken fails at once.
func createExclusive(file string) (*os.File, error) {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("%s already exists: a backup never overwrites a file; choose a new name, or remove the old file first", file)
	}
	if err != nil {
		return nil, fmt.Errorf("creating the backup file: %w", err)
	}
	// O_CREATE's mode only ever narrows under the umask; say 0600 anyway
	// so a reader of the code need not know that.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		os.Remove(file)
		return nil, fmt.Errorf("creating the backup file: %w", err)
	}
	return f, nil
}

// writeArchive encrypts a to f with the passphrase (age's scrypt
// recipient) and closes f. workFactor 0 is age's default.
func writeArchive(f *os.File, a *Archive, passphrase string, workFactor int) error {
	r, err := age.NewScryptRecipient(passphrase)
	if err != nil {
		f.Close()
		return fmt.Errorf("encrypting the backup: %w", err)
	}
	if workFactor > 0 {
		r.SetWorkFactor(workFactor)
	}
	if err := encodeArchive(f, a, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("writing the backup file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing the backup file: %w", err)
	}
	// Under sudo, a backup written into the invoking user's home is theirs.
	return userhome.Own(f.Name())
}

func encodeArchive(w io.Writer, a *Archive, r age.Recipient) error {
	enc, err := age.Encrypt(w, r)
	if err != nil {
		return fmt.Errorf("encrypting the backup: %w", err)
	}
	zw := gzip.NewWriter(enc)
	tw := tar.NewWriter(zw)
	manifest, err := json.MarshalIndent(a.Manifest, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the manifest: %w", err)
	}
	names := make([]string, 0, len(a.Files))
	for n := range a.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	put := func(name string, data []byte) error {
		h := &tar.Header{Name: name, Mode: 0o600, Size: int64(len(data)), ModTime: a.Manifest.Created, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := put(manifestName, manifest); err != nil {
		return fmt.Errorf("writing the backup: %w", err)
	}
	for _, n := range names {
		if err := put(n, a.Files[n]); err != nil {
			return fmt.Errorf("writing the backup: %w", err)
		}
	}
	for _, c := range []io.Closer{tw, zw, enc} {
		if err := c.Close(); err != nil {
			return fmt.Errorf("writing the backup: %w", err)
		}
	}
	return nil
}

// readArchive opens a backup with the passphrase. Each way a file can be
// wrong gets its own error naming the file: not a file of this kind, a
// wrong passphrase, truncated or damaged, another format.
func readArchive(file, passphrase string) (*Archive, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("opening the backup: %w", err)
	}
	defer f.Close()
	head := make([]byte, len(ageMagic))
	n, err := io.ReadFull(f, head)
	switch {
	case n == 0:
		return nil, fmt.Errorf("%s is empty: not a labctl backup", file)
	case err != nil || string(head) != ageMagic:
		return nil, fmt.Errorf("%s is not a labctl backup: it is not an age-encrypted file (a backup starts with %q)", file, ageMagic+"v1")
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("reading %s: %w", file, err)
	}
	id, err := age.NewScryptIdentity(passphrase)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", file, err)
	}
	plain, err := age.Decrypt(f, id)
	var nomatch *age.NoIdentityMatchError
	switch {
	case errors.As(err, &nomatch) && !slices.Contains(nomatch.StanzaTypes, "scrypt"):
		return nil, fmt.Errorf("%s is not a labctl backup: it is encrypted to age keys (%s), not with a passphrase", file, strings.Join(nomatch.StanzaTypes, ", "))
	case errors.As(err, &nomatch):
		return nil, fmt.Errorf("%s: %w (or the file was not written with it)", file, ErrWrongPassphrase)
	case err != nil:
		return nil, fmt.Errorf("%s is truncated or damaged: its age header does not read: %w", file, err)
	}
	// age authenticates every chunk and marks the last one, so reading to
	// the end proves the file whole before any of it is used.
	data, err := io.ReadAll(io.LimitReader(plain, maxPlain+1))
	if err != nil {
		return nil, fmt.Errorf("%s is truncated or damaged: %w", file, err)
	}
	if len(data) > maxPlain {
		return nil, fmt.Errorf("%s holds more than %d MiB: not a labctl backup", file, maxPlain>>20)
	}
	a, err := decodeArchive(data)
	if err != nil {
		return nil, fmt.Errorf("%s decrypts, but %w", file, err)
	}
	return a, nil
}

func decodeArchive(data []byte) (*Archive, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("is not a labctl backup (its content is not gzip: %v)", err)
	}
	tr := tar.NewReader(zr)
	a := &Archive{Files: map[string][]byte{}}
	for i := 0; ; i++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("is not a labctl backup (reading its archive: %v)", err)
		}
		if h.Typeflag != tar.TypeReg || !fs.ValidPath(h.Name) || path.Clean(h.Name) != h.Name {
			return nil, fmt.Errorf("is not a labctl backup (entry %q is not a plain file name)", h.Name)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("is not a labctl backup (reading %s: %v)", h.Name, err)
		}
		if i == 0 {
			if h.Name != manifestName {
				return nil, fmt.Errorf("is not a labctl backup (it does not start with %s)", manifestName)
			}
			if err := json.Unmarshal(body, &a.Manifest); err != nil {
				return nil, fmt.Errorf("is not a labctl backup (%s: %v)", manifestName, err)
			}
			if a.Manifest.Format != Format {
				return nil, fmt.Errorf("is a backup of format %q, which this labctl (format %q) does not read; use the labctl that wrote it (%s) or a newer one", a.Manifest.Format, Format, a.Manifest.Labctl)
			}
			continue
		}
		a.Files[h.Name] = body
	}
	if a.Manifest.Format == "" {
		return nil, fmt.Errorf("is not a labctl backup (no %s)", manifestName)
	}
	return a, nil
}
