package sshkey

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/hiloop/hiloop/internal/testenv"
)

// sshKeygen runs OpenSSH's ssh-keygen (Debian's openssh-client, which `make deps` installs).
func sshKeygen(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(testenv.RequireTool(t, "ssh-keygen"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ssh-keygen %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// OpenSSH reads the key Generate writes, and prints the same public key and fingerprint.
func TestGenerateReadsInOpenSSH(t *testing.T) {
	pub, file, err := Generate("hiloop")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	// ssh-keygen -y prints the type, the key and (from OpenSSH 9.4) the comment.
	if got, want := sshKeygen(t, "-y", "-f", path), strings.TrimSpace(string(pub.AuthorizedKey())); strings.Join(strings.Fields(got)[:2], " ") != want {
		t.Errorf("ssh-keygen -y = %q, want %q", got, want)
	}
	if got := sshKeygen(t, "-l", "-f", path); !strings.Contains(got, " "+pub.Fingerprint()+" hiloop ") {
		t.Errorf("ssh-keygen -l = %q, want fingerprint %s and comment hiloop", got, pub.Fingerprint())
	}
	back, err := ParsePrivate(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, pub) {
		t.Errorf("ParsePrivate = %x, want %x", back, pub)
	}
	// And x/crypto/ssh (the daemon's) agrees on every format.
	signer, err := gossh.ParsePrivateKey(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(signer.PublicKey().Marshal(), pub.Wire()) {
		t.Error("x/crypto/ssh reads another public key")
	}
	if got := gossh.FingerprintSHA256(signer.PublicKey()); got != pub.Fingerprint() {
		t.Errorf("fingerprint %s, x/crypto/ssh says %s", pub.Fingerprint(), got)
	}
	if got := gossh.MarshalAuthorizedKey(signer.PublicKey()); !bytes.Equal(got, pub.AuthorizedKey()) {
		t.Errorf("authorized key %q, x/crypto/ssh says %q", pub.AuthorizedKey(), got)
	}
}

// The keys earlier CLIs wrote with x/crypto/ssh still read.
func TestParsePrivateFromXCryptoSSH(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := gossh.MarshalPrivateKey(priv, "hiloop")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParsePrivate(pem.EncodeToMemory(block))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, pub) {
		t.Errorf("ParsePrivate = %x, want %x", got, pub)
	}
}

// ParsePrivate reads the key ssh-keygen makes, and refuses what is not an unencrypted Ed25519
// key with a reason.
func TestParsePrivateFromOpenSSH(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "k")
	sshKeygen(t, "-q", "-t", "ed25519", "-N", "", "-C", "someone@host", "-f", path)
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ParsePrivate(file)
	if err != nil {
		t.Fatal(err)
	}
	line, err := os.ReadFile(path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Join(strings.Fields(string(line))[:2], " "); strings.TrimSpace(string(pub.AuthorizedKey())) != want {
		t.Errorf("public key %q, ssh-keygen wrote %q", pub.AuthorizedKey(), want)
	}

	refused := map[string]string{}
	sshKeygen(t, "-q", "-t", "ed25519", "-N", "secret", "-f", filepath.Join(dir, "enc"))
	refused["enc"] = "encrypted"
	sshKeygen(t, "-q", "-t", "ecdsa", "-N", "", "-f", filepath.Join(dir, "ecdsa"))
	refused["ecdsa"] = "ecdsa-sha2-nistp256 key"
	sshKeygen(t, "-q", "-t", "rsa", "-b", "2048", "-m", "PEM", "-N", "", "-f", filepath.Join(dir, "pem"))
	refused["pem"] = "not an OpenSSH private key"
	for name, want := range refused {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParsePrivate(b); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one saying %q", name, err, want)
		}
	}
	// A damaged file: every truncation is refused, none panics.
	for i := range len(file) {
		_, _ = ParsePrivate(file[:i])
	}
	if _, err := ParsePrivate(bytes.Replace(file, []byte("AAAA"), []byte("AAAB"), 1)); err == nil {
		t.Error("a changed key file: no error")
	}
}

func FuzzParsePrivate(f *testing.F) {
	_, file, err := Generate("c")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(file)
	f.Fuzz(func(t *testing.T, b []byte) {
		pub, err := ParsePrivate(b)
		if err == nil && len(pub) != 32 {
			t.Fatalf("a %d-byte public key read without error", len(pub))
		}
	})
}
