package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/labctl/labctl/internal/files"
)

// maxSecretFile bounds a secret file: a token is a few dozen bytes, and a
// wrong path (a disk image, /dev/zero) must not be read whole.
const maxSecretFile = 64 << 10

// ReadTokenSecret reads the secret of h's Proxmox API token: the one way
// every command (and doctor, through CheckTokenSecret) reads it.
func (h *Hypervisor) ReadTokenSecret() (string, error) {
	ref, field, what, err := h.tokenSecret()
	if err != nil {
		return "", err
	}
	v, _, err := ref.read(field, what)
	return v, err
}

// CheckTokenSecret reads the token secret as ReadTokenSecret does, for
// doctor, and drops the value: found says where it is, warning is set when
// its file is readable by others. Neither carries the secret.
func (h *Hypervisor) CheckTokenSecret() (found, warning string, err error) {
	ref, field, what, err := h.tokenSecret()
	if err != nil {
		return "", "", err
	}
	_, fi, err := ref.read(field, what)
	if err != nil {
		return "", "", err
	}
	if fi == nil {
		return "env " + ref.Env + " is set", "", nil
	}
	path, _ := files.ExpandHome(ref.File) // read expanded it already
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		warning = fmt.Sprintf("file %s has mode %04o, wider than 0600: chmod 600 %s", path, perm, path)
	}
	return fmt.Sprintf("file %s (mode %04o)", path, fi.Mode().Perm()), warning, nil
}

func (h *Hypervisor) tokenSecret() (ref SecretRef, field, what string, err error) {
	if h.Proxmox == nil {
		return SecretRef{}, "", "", fmt.Errorf("hypervisors[%s] is not a Proxmox hypervisor, so it has no token secret", h.Name)
	}
	return h.Proxmox.TokenSecret, fmt.Sprintf("hypervisors[%s].proxmox.tokenSecret", h.Name), "the secret of token " + h.Proxmox.TokenID, nil
}

// read returns the secret r names, trimmed of surrounding whitespace, and
// the file's info when it is kept in a file. field is r's config path, what
// says whose secret it is. Errors name the field, the variable or file and
// the fix, and never carry the value.
func (r SecretRef) read(field, what string) (string, fs.FileInfo, error) {
	switch {
	case r.Env != "":
		v, ok := os.LookupEnv(r.Env)
		if !ok {
			return "", nil, fmt.Errorf("%s.env: %s is not set: export %s=<%s>", field, r.Env, r.Env, what)
		}
		if v = strings.TrimSpace(v); v == "" {
			return "", nil, fmt.Errorf("%s.env: %s is set but empty: export %s=<%s>", field, r.Env, r.Env, what)
		}
		return v, nil, nil
	case r.File != "":
		field += ".file"
		path, err := files.ExpandHome(r.File)
		if err != nil {
			return "", nil, fmt.Errorf("%s: %w", field, err)
		}
		f, err := os.Open(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return "", nil, fmt.Errorf("%s: %s does not exist: write %s there and chmod 600 it", field, path, what)
		case err != nil:
			// The path error names the file; it never holds the content.
			return "", nil, fmt.Errorf("%s: %s cannot be read: %v", field, path, cause(err))
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return "", nil, fmt.Errorf("%s: %s cannot be read: %v", field, path, cause(err))
		}
		if fi.IsDir() {
			return "", nil, fmt.Errorf("%s: %s is a folder, not a file holding %s", field, path, what)
		}
		data, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
		if err != nil {
			return "", nil, fmt.Errorf("%s: %s cannot be read: %v", field, path, cause(err))
		}
		if len(data) > maxSecretFile {
			return "", nil, fmt.Errorf("%s: %s is larger than %d KiB, so it does not hold just %s; name the file that does", field, path, maxSecretFile>>10, what)
		}
		v := strings.TrimSpace(string(data))
		if v == "" {
			return "", nil, fmt.Errorf("%s: %s is empty: write %s there", field, path, what)
		}
		return v, fi, nil
	}
	return "", nil, fmt.Errorf("%s: name an env variable or a file holding %s", field, what)
}

// cause is what went wrong beneath a path error, which would repeat the path.
func cause(err error) error {
	if u := errors.Unwrap(err); u != nil {
		return u
	}
	return err
}
