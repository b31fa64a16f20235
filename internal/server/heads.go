package server

import (
	"errors"
	"fmt"

	"github.com/quicksilver-kv/qs/internal/config"
	"github.com/quicksilver-kv/qs/internal/headsig"
	"github.com/quicksilver-kv/qs/internal/repl"
)

// logKeys are the keys of signed log heads (docs/operations.md, "Security
// model"): the root's signing key, and the public key every replica and
// proxy verifies heads with.
type logKeys struct {
	signer   *headsig.Signer   // nil: this node signs nothing
	verifier *headsig.Verifier // nil: replicas apply entries unsigned
}

// errMismatchedLogKeys: root_signing_key and root_public_key are not a pair.
var errMismatchedLogKeys = errors.New("qs: root_public_key is not the public half of root_signing_key")

// loadLogKeys reads root_signing_key and root_public_key. A node with
// both must hold a matching pair: a root signing with another key than
// the one its replicas verify with would stop them all.
func loadLogKeys(c *config.Config) (logKeys, error) {
	var k logKeys
	var err error
	if c.RootSigningKey != "" {
		if k.signer, err = headsig.LoadSigner(c.RootSigningKey); err != nil {
			return k, err
		}
	}
	if c.RootPublicKey != "" {
		if k.verifier, err = headsig.LoadVerifier(c.RootPublicKey); err != nil {
			return k, err
		}
	}
	if k.signer != nil && k.verifier != nil && !k.verifier.Matches(k.signer) {
		return k, errMismatchedLogKeys
	}
	return k, nil
}

// heads is the HeadSource of the replication server for database db: a
// root signs its own log; a replica or proxy that verifies heads forwards
// the ones it verified, and relays the bootstraps that ask for the root's
// seal to its source. A replica never signs, even on a node that holds
// the signing key.
func (s *Server) heads(db string) repl.HeadSource {
	for _, d := range s.cfg.Databases {
		if d.Name != db {
			continue
		}
		if !d.IsReplica() {
			return repl.HeadSource{Signer: s.keys.signer}
		}
		if r, ok := s.replicas[db]; ok && s.keys.verifier != nil {
			return repl.HeadSource{Book: r.Book(), Upstream: r.DialSource}
		}
	}
	return repl.HeadSource{}
}

// forkedReasons are the /healthz reasons of replica databases whose log
// forked from their source's, when unhealthy_when_forked is set.
func (s *Server) forkedReasons() []string {
	if !s.cfg.UnhealthyWhenForked {
		return nil
	}
	var why []string
	for _, name := range s.order {
		if r, ok := s.replicas[name]; ok && r.State().Status == repl.StatusForked {
			why = append(why, fmt.Sprintf("database %s: its log forked from its source's; it applies nothing more (qs repair bootstraps it again)", name))
		}
	}
	return why
}

// warnUnsignedRoots says at start that a root database will not sign its
// log although the node has the public key: replicas that verify heads
// apply nothing from it (an HA root's members must all hold the signing
// key).
func (s *Server) warnUnsignedRoots() {
	if s.keys.verifier == nil || s.keys.signer != nil {
		return
	}
	for _, d := range s.cfg.Databases {
		if !d.IsReplica() {
			s.log.Warn("root database without root_signing_key: replicas with root_public_key apply nothing from it", "db", d.Name)
		}
	}
}
