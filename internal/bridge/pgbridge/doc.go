// Package pgbridge copies one PostgreSQL table into qs and then follows its
// changes through logical replication (the pgoutput plugin).
//
// Each row becomes the key prefix + its primary key as text, holding the
// row as a JSON object; a delete removes the key. Each PostgreSQL
// transaction becomes one atomic qs batch, which also stores the
// transaction's end LSN under the bridge's state key (see package bridge),
// and PostgreSQL is told the LSN is done only after qs acknowledged it:
// after a crash at any point, the bridge resumes from the LSN qs holds,
// skips what PostgreSQL sends again, and neither loses nor repeats a change.
//
// The initial copy reads the table in the snapshot exported when the
// replication slot is created, so the copy and the stream meet exactly at
// the slot's consistent point. Decoding (Decoder, RowJSON, Ops) is pure and
// tested directly; Bridge does the I/O.
package pgbridge
