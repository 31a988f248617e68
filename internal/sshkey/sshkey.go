// Package sshkey reads and writes the one kind of SSH key the CLI keeps: an unencrypted
// Ed25519 key in OpenSSH's own private key format, with its authorized_keys line and SHA256
// fingerprint as ssh-keygen prints them.
//
// golang.org/x/crypto/ssh does all of this and much more, but its package initialisation (Diffie-
// Hellman groups parsed into big integers, every elliptic curve set up) ran at every start of
// hiloop, whatever the command, for a key the CLI touches only in `sandbox ssh` and `ssh-key add`.
// The formats are small and fixed (OpenSSH's PROTOCOL.key and RFC 8709); the tests check both
// directions against ssh-keygen.
package sshkey

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
)

const (
	keyType   = "ssh-ed25519"
	magic     = "openssh-key-v1\x00"
	pemType   = "OPENSSH PRIVATE KEY"
	blockSize = 8 // the padding of the private section for cipher "none"
)

// PublicKey is an Ed25519 public key as SSH names it.
type PublicKey ed25519.PublicKey

// Generate makes a new key and returns it with its private key file's contents (PEM, mode 0600
// material) carrying comment.
func Generate(comment string) (PublicKey, []byte, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	file, err := marshalPrivate(priv, comment)
	if err != nil {
		return nil, nil, err
	}
	return PublicKey(pub), file, nil
}

// Wire is the key in SSH's wire format (RFC 8709): string "ssh-ed25519", string key.
func (k PublicKey) Wire() []byte {
	var b []byte
	b = appendString(b, []byte(keyType))
	return appendString(b, k)
}

// AuthorizedKey is the key's authorized_keys line, ending in a newline.
func (k PublicKey) AuthorizedKey() []byte {
	return []byte(keyType + " " + base64.StdEncoding.EncodeToString(k.Wire()) + "\n")
}

// Fingerprint is the key's SHA256 fingerprint as ssh-keygen -l prints it ("SHA256:…").
func (k PublicKey) Fingerprint() string {
	sum := sha256.Sum256(k.Wire())
	return "SHA256:" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// ParsePrivate reads an unencrypted Ed25519 key in OpenSSH's format and returns its public key.
func ParsePrivate(file []byte) (PublicKey, error) {
	block, _ := pem.Decode(file)
	if block == nil || block.Type != pemType {
		return nil, errors.New("not an OpenSSH private key (want a -----BEGIN " + pemType + "----- block)")
	}
	r := reader{b: block.Bytes}
	if !bytes.HasPrefix(r.b, []byte(magic)) {
		return nil, errors.New("not an openssh-key-v1 key")
	}
	r.b = r.b[len(magic):]
	cipher, kdf, _, n := r.string(), r.string(), r.string(), r.uint32()
	if r.err == nil && (string(cipher) != "none" || string(kdf) != "none") {
		return nil, errors.New("the key is encrypted; the CLI's own key has no passphrase")
	}
	if r.err == nil && n != 1 {
		return nil, fmt.Errorf("the file holds %d keys, want 1", n)
	}
	_ = r.string() // the public key again, checked against the private section below
	priv := reader{b: r.string()}
	if r.err != nil {
		return nil, fmt.Errorf("truncated key: %w", r.err)
	}
	check1, check2 := priv.uint32(), priv.uint32()
	typ, pub, secret := priv.string(), priv.string(), priv.string()
	_ = priv.string() // comment
	if priv.err != nil {
		return nil, fmt.Errorf("truncated private section: %w", priv.err)
	}
	if check1 != check2 {
		return nil, errors.New("the private section's check numbers differ (a wrong passphrase or a damaged file)")
	}
	if string(typ) != keyType {
		return nil, fmt.Errorf("a %s key; the CLI keeps an %s key", typ, keyType)
	}
	if len(pub) != ed25519.PublicKeySize || len(secret) != ed25519.PrivateKeySize {
		return nil, errors.New("an Ed25519 key of the wrong size")
	}
	// The private key is the seed followed by the public key; the seed must give that key.
	derived := ed25519.NewKeyFromSeed(secret[:ed25519.SeedSize]).Public().(ed25519.PublicKey)
	if !bytes.Equal(derived, pub) || !bytes.Equal(secret[ed25519.SeedSize:], pub) {
		return nil, errors.New("the key's public and private halves do not match")
	}
	return PublicKey(bytes.Clone(pub)), nil
}

// marshalPrivate writes priv in OpenSSH's private key format, unencrypted (PROTOCOL.key).
func marshalPrivate(priv ed25519.PrivateKey, comment string) ([]byte, error) {
	pub := PublicKey(priv.Public().(ed25519.PublicKey))
	var check [4]byte
	if _, err := rand.Read(check[:]); err != nil {
		return nil, err
	}
	var sec []byte
	sec = append(sec, check[:]...)
	sec = append(sec, check[:]...)
	sec = appendString(sec, []byte(keyType))
	sec = appendString(sec, pub)
	sec = appendString(sec, priv)
	sec = appendString(sec, []byte(comment))
	for i := byte(1); len(sec)%blockSize != 0; i++ {
		sec = append(sec, i)
	}
	b := []byte(magic)
	b = appendString(b, []byte("none"))
	b = appendString(b, []byte("none"))
	b = appendString(b, nil)
	b = binary.BigEndian.AppendUint32(b, 1)
	b = appendString(b, pub.Wire())
	b = appendString(b, sec)
	return pem.EncodeToMemory(&pem.Block{Type: pemType, Bytes: b}), nil
}

func appendString(b, s []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// reader takes SSH wire fields off b; after the first short read err is set and every field is
// empty.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uint32() uint32 {
	if r.err != nil || len(r.b) < 4 {
		r.err = errors.New("short field")
		return 0
	}
	v := binary.BigEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

func (r *reader) string() []byte {
	n := r.uint32()
	if r.err != nil || uint64(n) > uint64(len(r.b)) {
		r.err = errors.New("short field")
		return nil
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}
