package pgbridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// PostgreSQL type OIDs that map to JSON numbers, booleans or raw JSON.
const (
	oidBool    = 16
	oidInt8    = 20
	oidInt2    = 21
	oidInt4    = 23
	oidOID     = 26
	oidJSON    = 114
	oidFloat4  = 700
	oidFloat8  = 701
	oidNumeric = 1700
	oidJSONB   = 3802
)

// Column is one column of the bridged table.
type Column struct {
	Name string
	Type uint32 // type OID
}

// Field is one column of a row: its value in PostgreSQL's text format, or
// NULL, or (in an update) a large value the update left unchanged and
// logical replication did not resend.
type Field struct {
	Text      string
	Null      bool
	Unchanged bool
}

// ErrUnchangedKey says an update left the key column out of the new row.
var ErrUnchangedKey = errors.New("pgbridge: row without its key column value")

// KeyOf returns the qs key of a row: prefix + the key column as text.
func KeyOf(prefix string, keyCol int, row []Field) (string, error) {
	if keyCol < 0 || keyCol >= len(row) {
		return "", fmt.Errorf("pgbridge: key column %d of a %d-column row", keyCol, len(row))
	}
	f := row[keyCol]
	if f.Null || f.Unchanged {
		return "", ErrUnchangedKey
	}
	return prefix + f.Text, nil
}

// RowJSON encodes a row as a JSON object, column name → value, in column
// order: numbers and booleans as JSON numbers and booleans, json and jsonb
// as the JSON they hold, NULL as null, every other type as its text form
// in a string. Unchanged fields are taken from prev, the row's current JSON
// in qs; without prev (or the column absent from it) they are an error.
func RowJSON(cols []Column, row []Field, prev []byte) ([]byte, error) {
	if len(row) != len(cols) {
		return nil, fmt.Errorf("pgbridge: row of %d columns for a table of %d", len(row), len(cols))
	}
	var old map[string]json.RawMessage
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, c := range cols {
		if i > 0 {
			buf.WriteByte(',')
		}
		name, _ := json.Marshal(c.Name)
		buf.Write(name)
		buf.WriteByte(':')
		f := row[i]
		if f.Unchanged {
			if old == nil && prev != nil {
				if err := json.Unmarshal(prev, &old); err != nil {
					return nil, fmt.Errorf("pgbridge: current value of the row is not a JSON object: %w", err)
				}
			}
			v, ok := old[c.Name]
			if !ok {
				return nil, fmt.Errorf("pgbridge: column %q unchanged by an update, and qs holds no value for it", c.Name)
			}
			buf.Write(v)
			continue
		}
		v, err := FieldJSON(c.Type, f)
		if err != nil {
			return nil, fmt.Errorf("pgbridge: column %q: %w", c.Name, err)
		}
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// FieldJSON encodes one field of a column of type oid.
func FieldJSON(oid uint32, f Field) ([]byte, error) {
	if f.Null {
		return []byte("null"), nil
	}
	switch oid {
	case oidBool:
		switch f.Text {
		case "t", "true":
			return []byte("true"), nil
		case "f", "false":
			return []byte("false"), nil
		}
		return nil, fmt.Errorf("boolean %q", f.Text)
	case oidInt2, oidInt4, oidInt8, oidOID:
		if _, err := strconv.ParseInt(f.Text, 10, 64); err != nil {
			if _, err := strconv.ParseUint(f.Text, 10, 64); err != nil {
				return nil, fmt.Errorf("integer %q", f.Text)
			}
		}
		return []byte(f.Text), nil
	case oidFloat4, oidFloat8, oidNumeric:
		// NaN and ±Infinity have no JSON number: they stay strings.
		if isJSONNumber(f.Text) {
			return []byte(f.Text), nil
		}
		return json.Marshal(f.Text)
	case oidJSON, oidJSONB:
		if !json.Valid([]byte(f.Text)) {
			return nil, fmt.Errorf("invalid JSON %q", f.Text)
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, []byte(f.Text)); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	}
	return json.Marshal(f.Text)
}

// isJSONNumber reports whether s is a number in JSON's grammar.
func isJSONNumber(s string) bool {
	var n json.Number
	if json.Unmarshal([]byte(s), &n) != nil {
		return false
	}
	return n.String() == s
}
