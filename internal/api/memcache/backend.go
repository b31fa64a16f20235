package memcache

import "context"

// Attrs are what is stored with a value besides its bytes.
type Attrs struct {
	// Flags are the client flags (32 bits, opaque to the server).
	Flags uint32
	// Expires is the time (Unix ns, on the log's clock) from which the
	// root deletes the key; 0: never.
	Expires int64
}

// Backend is what the memcached front door needs from one database.
//
// Error contract: errors are (or wrap) the sentinels of package
// internal/store and are told apart with errors.Is. ErrNotRoot, ErrTooLarge
// and ErrInvalid are the client's fault and are answered with CLIENT_ERROR;
// ErrDiskFull, ErrWriteFailed, ErrCorrupt, ErrClosed and anything else are
// answered with SERVER_ERROR. A Get that returns an error is answered with
// SERVER_ERROR only: values already passed to found are discarded, so a client
// never sees part of a read that failed (in particular one that hit corrupt
// data).
//
// Ownership: keys, values and the keys slice passed to the Backend are owned
// by the server and valid only until the call returns; the key and value
// passed to found are only read during the callback. A Backend copies what it
// keeps. Methods are called concurrently from many connections.
type Backend interface {
	// Get reads keys at one consistent log index. found is called once per
	// key that exists, in request order (duplicates in the request are looked
	// up again), with the value's attributes. Returns the index the read
	// was served at.
	Get(keys [][]byte, found func(key, value []byte, index uint64, a Attrs)) (uint64, error)
	// Set stores value, with its attributes, under key and returns once it
	// is durable.
	Set(ctx context.Context, key, value []byte, a Attrs) (index uint64, err error)
	// Delete removes key once durable; existed reports whether it was present.
	Delete(ctx context.Context, key []byte) (index uint64, existed bool, err error)
	// WriteIf stores value with attributes under key (or deletes key
	// when del) if the key's index is still ifIndex (0: the key is
	// absent), as one atomic entry of the log, and returns once it is
	// durable. If the key's index differs it changes nothing and fails
	// with store.ErrConditionFailed.
	WriteIf(ctx context.Context, key, value []byte, a Attrs, del bool, ifIndex uint64) (index uint64, err error)
	// FlushAll deletes every key of the database as one entry of the log
	// and returns once it is durable. It fails (store.ErrInvalid) where the
	// database's configuration does not allow it.
	FlushAll(ctx context.Context) (index uint64, err error)
	// Writable returns nil if this node takes writes, else the error a
	// write would fail with (store.ErrNotRoot at a replica or proxy). The
	// commands that read before they write (replace, append, incr, ...)
	// ask first, so that a node that takes no writes refuses them as it
	// refuses set, whatever the key holds.
	Writable() error
	// Stats returns extra name/value pairs for the `stats` command (e.g. applied_index, db_id, role).
	Stats() [][2]string
}
