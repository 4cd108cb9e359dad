package vmssh

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/labctl/labctl/internal/files"
	"github.com/labctl/labctl/internal/sshkey"
)

// UserAuth finds the private halves of the public keys lab.yaml authorizes
// on the VM (authorized, one authorized_keys line each): first in ssh-agent
// (SSH_AUTH_SOCK), then in the private key file beside pubKeyFile (the same
// path without .pub, ~ allowed). Keys that the VM would not accept are left
// out, so sshd never sees a key it must refuse. The private key is read
// here only, and is never printed.
func UserAuth(authorized []string, pubKeyFile string) ([]ssh.Signer, error) {
	want := map[string]bool{}
	for _, line := range authorized {
		k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
		if err == nil {
			want[string(k.Marshal())] = true
		}
	}
	if len(want) == 0 {
		return nil, errors.New("management: no SSH public key to log in to the VM with; set management.sshPublicKeyFile or sshPublicKeys")
	}
	var signers []ssh.Signer
	var why []string
	if sock := os.Getenv("SSH_AUTH_SOCK"); sock != "" {
		if conn, err := net.Dial("unix", sock); err == nil {
			// The connection stays open: agent signers use it on every login.
			all, err := agent.NewClient(conn).Signers()
			if err != nil {
				why = append(why, fmt.Sprintf("ssh-agent: %v", err))
			}
			for _, s := range all {
				if want[string(s.PublicKey().Marshal())] {
					signers = append(signers, s)
				}
			}
		} else {
			why = append(why, fmt.Sprintf("ssh-agent at SSH_AUTH_SOCK: %v", err))
		}
	} else {
		why = append(why, "SSH_AUTH_SOCK is not set (no ssh-agent)")
	}
	if pubKeyFile != "" {
		pub, err := files.ExpandHome(pubKeyFile)
		if err != nil {
			return nil, fmt.Errorf("management.sshPublicKeyFile: %w", err)
		}
		priv := strings.TrimSuffix(pub, ".pub")
		s, err := sshkey.ReadPrivate(priv)
		switch {
		case err == nil && want[string(s.PublicKey().Marshal())]:
			if !hasSigner(signers, s) {
				signers = append(signers, s)
			}
		case err == nil:
			why = append(why, fmt.Sprintf("%s is not the private half of the authorized keys", priv))
		default:
			why = append(why, err.Error())
		}
	}
	if len(signers) == 0 {
		return nil, fmt.Errorf("no private key for the SSH keys lab.yaml puts on the VM (%s); labctl reads the kubeconfig over SSH with one of them: load it into ssh-agent (ssh-add), or keep its private file beside management.sshPublicKeyFile", strings.Join(why, "; "))
	}
	return signers, nil
}

func hasSigner(list []ssh.Signer, s ssh.Signer) bool {
	for _, o := range list {
		if bytes.Equal(o.PublicKey().Marshal(), s.PublicKey().Marshal()) {
			return true
		}
	}
	return false
}
