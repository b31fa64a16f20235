package clusterauth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"syscall"
)

// The keyed handshake, before any protocol byte:
//
//	client → server  "QSK1" client_nonce(32)
//	server → client  server_nonce(32) HMAC(k, "qs server" || client_nonce || server_nonce)
//	client → server  HMAC(k, "qs client" || client_nonce || server_nonce || len(1) || claim) len(1) claim
//	server → client  0x01
//
// k is the handshake key derived from the cluster key. During a rotation a
// node holds several keys, the one it proves itself with first: a server
// proves itself with its first key and accepts a client's MAC under any
// of its keys; a client accepts a server's proof under any of its keys and
// answers under the key that verified it. The server reveals
// only a random nonce and a MAC over nonces before the client proves it
// holds the key; it closes without a word on a bad MAC. The direction
// labels keep a MAC of one side from being replayed as the other's.

const (
	keyMagic    = "QSK1"
	nonceLen    = 32
	macLen      = sha256.Size
	maxClaimLen = 255
	acceptByte  = 0x01

	// MaxPreAuthBytes is the most a server reads from a peer that has not
	// authenticated yet in the keyed handshake.
	MaxPreAuthBytes = len(keyMagic) + nonceLen + macLen + 1 + maxClaimLen
)

// Handshake errors.
var (
	// ErrBadKey: the peer does not hold the cluster key (its MAC is wrong).
	ErrBadKey = errors.New("qs: cluster key handshake: peer does not hold the cluster key")
	// ErrNotKeyed: the peer did not open with a keyed handshake.
	ErrNotKeyed = errors.New("qs: cluster key handshake: peer did not start one")
	// ErrRefused: the server closed the connection during the handshake
	// (it does not hold the same key, or speaks no keyed handshake).
	ErrRefused = errors.New("qs: cluster key handshake refused by the server (is it configured with the same cluster key?)")
)

func mac(k []byte, label string, parts ...[]byte) []byte {
	h := hmac.New(sha256.New, k)
	h.Write([]byte(label))
	for _, p := range parts {
		h.Write(p)
	}
	return h.Sum(nil)
}

func nonce() []byte {
	b := make([]byte, nonceLen)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return b
}

// clientHandshake proves to the server at rw that this side holds one of
// keys, checks that the server holds one of them too, and sends claim
// under the MAC of the key they share.
func clientHandshake(rw io.ReadWriter, keys [][]byte, claim string) error {
	if len(claim) > maxClaimLen {
		return fmt.Errorf("qs: cluster key handshake: claim of %d bytes over %d", len(claim), maxClaimLen)
	}
	cn := nonce()
	if _, err := rw.Write(append([]byte(keyMagic), cn...)); err != nil {
		return refusedOr(err)
	}
	var resp [nonceLen + macLen]byte
	if _, err := io.ReadFull(rw, resp[:]); err != nil {
		return refusedOr(err)
	}
	sn, smac := resp[:nonceLen], resp[nonceLen:]
	c := []byte{byte(len(claim))}
	c = append(c, claim...)
	k := keys[0]
	shared := false
	for _, kk := range keys {
		if hmac.Equal(smac, mac(kk, "qs server", cn, sn)) {
			k, shared = kk, true
			break
		}
	}
	out := append(mac(k, "qs client", cn, sn, c), c...)
	if !shared {
		// Answer anyway, without the claim, so that the server sees (and
		// counts) a wrong key rather than a dropped connection.
		rw.Write(mac(k, "qs client", cn, sn, []byte{0}))
		rw.Write([]byte{0})
		return fmt.Errorf("%w (the server's proof did not verify)", ErrBadKey)
	}
	if _, err := rw.Write(out); err != nil {
		return refusedOr(err)
	}
	var ack [1]byte
	if _, err := io.ReadFull(rw, ack[:]); err != nil {
		return refusedOr(err)
	}
	if ack[0] != acceptByte {
		return ErrRefused
	}
	return nil
}

// refusedOr maps a server closing the connection during the handshake
// to ErrRefused: a close is read as EOF, or as a reset when the close
// found bytes of ours unread (then a write fails too).
func refusedOr(err error) error {
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return ErrRefused
	}
	return err
}

// serverHandshake proves this side holds keys[0], checks that the client
// at rw holds one of keys and returns the claim it sent. It reads at most
// MaxPreAuthBytes.
func serverHandshake(rw io.ReadWriter, keys [][]byte) (string, error) {
	k := keys[0]
	var hello [len(keyMagic) + nonceLen]byte
	if _, err := io.ReadFull(rw, hello[:]); err != nil {
		return "", err
	}
	if string(hello[:len(keyMagic)]) != keyMagic {
		return "", ErrNotKeyed
	}
	cn := hello[len(keyMagic):]
	sn := nonce()
	if _, err := rw.Write(append(append([]byte{}, sn...), mac(k, "qs server", cn, sn)...)); err != nil {
		return "", err
	}
	var head [macLen + 1]byte
	if _, err := io.ReadFull(rw, head[:]); err != nil {
		return "", err
	}
	c := make([]byte, 1+int(head[macLen]))
	c[0] = head[macLen]
	if _, err := io.ReadFull(rw, c[1:]); err != nil {
		return "", err
	}
	ok := false
	for _, kk := range keys {
		if hmac.Equal(head[:macLen], mac(kk, "qs client", cn, sn, c)) {
			ok = true
			break
		}
	}
	if !ok {
		return "", ErrBadKey
	}
	if _, err := rw.Write([]byte{acceptByte}); err != nil {
		return "", err
	}
	return string(c[1:]), nil
}
