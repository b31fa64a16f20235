package repl

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

// LearnDBID asks the sources, in order, which database id they serve for
// database db, with a handshake that expects no particular id and asks for
// nothing but the newest position. A new replica calls it before creating
// its store, so the store is created with the root's id.
func LearnDBID(ctx context.Context, sources []string, db string, id ProcessID, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (store.DBID, error) {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	var errs []error
	for _, src := range sources {
		dbid, err := learnFrom(ctx, src, db, id, dial)
		if err == nil {
			return dbid, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", src, err))
	}
	return store.DBID{}, fmt.Errorf("learn database id of %q: %w", db, errors.Join(errs...))
}

func learnFrom(ctx context.Context, src, db string, id ProcessID, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (store.DBID, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := dial(ctx, "tcp", src)
	if err != nil {
		return store.DBID{}, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	// StopIndex 1 with NewestOnly: the server answers Welcome and has
	// nothing to send; we hang up right after Welcome anyway.
	hello := &Hello{Version: streamVersion, Database: db, ProcessID: id, NewestOnly: true, StopIndex: 1}
	if err := WriteMessage(c, hello); err != nil {
		return store.DBID{}, err
	}
	m, err := ReadMessage(bufio.NewReader(c))
	if err != nil {
		return store.DBID{}, err
	}
	switch m := m.(type) {
	case *Welcome:
		if m.DBID.IsZero() {
			return store.DBID{}, errors.New("source announced a zero database id")
		}
		return m.DBID, nil
	case *Refuse:
		return store.DBID{}, &RefusedError{Code: m.Code, Reason: m.Reason}
	default:
		return store.DBID{}, fmt.Errorf("%w: expected Welcome, got %T", ErrMalformed, m)
	}
}
