package server

import (
	"fmt"

	"github.com/quicksilver-kv/qs/internal/clusterauth"
	"github.com/quicksilver-kv/qs/internal/headsig"
)

// ReloadKeys reads the cluster key file, repl_tls's certificates and the
// root's key files again (SIGHUP) and puts them in force without a
// restart: connections that start from now on authenticate with the new
// keys and certificates (those open keep their session), heads are
// verified with the new public keys and, on a root, signed with the new
// private key. Every file is read and checked before anything changes: on
// any error nothing changes and the keys in force stay. Adding or
// removing the cluster key, mutual TLS or a signing or public key needs a
// restart.
func (s *Server) ReloadKeys() (err error) {
	defer func() { s.meters.auth.CountReload(err == nil) }()
	o, err := authOptions(s.cfg)
	if err != nil {
		return err
	}
	k := s.keys
	if (s.cfg.RootPublicKey != "") != (k.verifier != nil) || (s.cfg.RootSigningKey != "") != (k.signer != nil) {
		return fmt.Errorf("qs: root_public_key or root_signing_key added or removed: restart to change them")
	}
	var pubs []headsig.PublicKey
	if k.verifier != nil {
		if pubs, err = headsig.LoadPublicKeys(s.cfg.RootPublicKey); err != nil {
			return err
		}
	}
	var priv headsig.PrivateKey
	if k.signer != nil {
		if priv, err = headsig.LoadPrivateKey(s.cfg.RootSigningKey); err != nil {
			return err
		}
		if pubs != nil && !headsig.Trusts(pubs, priv.Public().(headsig.PublicKey)) {
			return errMismatchedLogKeys
		}
	}
	if err := s.auth.Reload(o); err != nil {
		return err
	}
	if s.overlay != nil && !o.Key.IsZero() {
		primary, more := gossipKeys(append([]clusterauth.Key{o.Key}, o.MoreKeys...))
		if err := s.overlay.SetKeys(primary, more); err != nil {
			return err
		}
	}
	if pubs != nil {
		if err := k.verifier.SetKeys(pubs...); err != nil {
			return err
		}
	}
	if priv != nil {
		if err := k.signer.SetKey(priv); err != nil {
			return err
		}
	}
	s.log.Info("keys and certificates reloaded", "auth", s.auth.Mode(), "root_public_keys", len(pubs), "signing_key", priv != nil)
	return nil
}
