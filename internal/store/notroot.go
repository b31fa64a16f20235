package store

import "strings"

// NotRootError is ErrNotRoot with where the database's writes are
// accepted, as the node that refuses the write knows it.
type NotRootError struct {
	// Database is the database written to.
	Database string
	// Root are the HTTP addresses of its root (any member of an HA root),
	// as this node learnt them down the tree; none: it does not know them.
	Root []string
	// Detail says what this node is and what it follows.
	Detail string
}

func (e *NotRootError) Error() string {
	var b strings.Builder
	b.WriteString(ErrNotRoot.Error())
	b.WriteString(": ")
	b.WriteString(e.Detail)
	if len(e.Root) > 0 {
		b.WriteString("; send writes to its root at http://")
		b.WriteString(strings.Join(e.Root, " or http://"))
	} else {
		b.WriteString("; the HTTP address of its root is not known here (no source has told it yet): send writes to the root's HTTP address")
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrNotRoot) hold.
func (e *NotRootError) Unwrap() error { return ErrNotRoot }
