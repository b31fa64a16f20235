package gateway

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
)

// tokenPrefix starts generated tokens, so that a leaked one is easy to
// recognise (secret scanners, logs).
const tokenPrefix = "qs_"

// NewToken returns a new random token (256 bits from crypto/rand) and the
// hash to put in the producers file.
func NewToken() (token, hash string) {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand, Go ≥ 1.24)
	token = tokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return token, HashToken(token)
}

// HashToken returns the producers-file form of a token's hash:
// "sha256:" + hex(SHA-256(token)). Tokens are 256-bit random secrets, so a
// plain SHA-256 is enough: a slow password hash (bcrypt, argon2) protects
// guessable secrets and would only add latency to every write.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return tokenHashPrefix + hex.EncodeToString(sum[:])
}
