//go:build !qsfailpoints

package server

import "github.com/quicksilver-kv/qs/internal/store"

// failpointAfterPersist: a release build has no failpoints, whatever
// QS_FAILPOINT says (failpoint.go is the qsfailpoints build's side).
func failpointAfterPersist(*store.Store) func(uint64) { return nil }

// failpointForwarded: none in a release build either.
func failpointForwarded(*store.Store) func(uint64) { return nil }
