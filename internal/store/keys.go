package store

import "encoding/binary"

// The keyspaces of one database inside its Pebble instance. Each starts with
// one byte; docs/storage.md describes the layout.
const (
	metaPrefix  = 'm' // m<name>: metadata, see the meta* keys
	prefixData  = 'd' // d<key>: value record of a live key
	prefixChunk = 'c' // c<uvarint len(key)><key><BE32 chunk#>: chunk of a large value
	prefixLog   = 'l' // l<BE64 index of first entry>: log block
	// h: MVCC history of full nodes (history.go)
	prefixHistory = 'h'
	// e: the expiry index (expiry.go), prefixExpiry
)

var (
	metaDBID    = []byte("mdbid")    // 16 bytes
	metaFormat  = []byte("mformat")  // 1 byte: storage format version
	metaApplied = []byte("mapplied") // appliedRecord
	metaLog     = []byte("mlog")     // logRecord
	metaStats   = []byte("mstats")   // statsRecord
	metaHistory = []byte("mhist")    // historyRecord
	metaProxy   = []byte("mproxy")   // proxyRecord: present iff the store is a proxy
	metaRetired = []byte("mretired") // retiredTotals (retire.go)
	// metaRetiredBlock + BE64 block: retiredRecord of a retired log block
	metaRetiredBlock = []byte("mrb")
	// metaBlockSummary + BE64 block: blockSummary of a log block (summary.go)
	metaBlockSummary = []byte("mlb")
	// metaSegments: segTail, where the next block goes in the log
	// segments (segment.go); absent until the first block is appended
	metaSegments = []byte("mseg")
	// metaSegUse + BE64 seq: segUse, the block keys pointing into a log
	// segment and their bytes; absent when none does
	metaSegUse = []byte("msu")
)

// formatVersion is the storage layout version written at creation. 2:
// history versions may be in-log records (history.go). A database of
// version 1 (whose history holds copies only) is read as it is and marked
// 2 when opened for writing; a binary that knows only 1 refuses it then.
const (
	formatVersion    = 2
	oldFormatVersion = 1
)

// knownFormat reports whether f is a storage format record this code reads.
func knownFormat(f []byte) bool {
	return len(f) == 1 && (f[0] == formatVersion || f[0] == oldFormatVersion)
}

func dataKey(dst, key []byte) []byte {
	dst = append(dst[:0], prefixData)
	return append(dst, key...)
}

func chunkKey(dst, key []byte, i uint32) []byte {
	dst = append(dst[:0], prefixChunk)
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	return binary.BigEndian.AppendUint32(dst, i)
}

func logKey(index uint64) []byte {
	k := make([]byte, 9)
	k[0] = prefixLog
	binary.BigEndian.PutUint64(k[1:], index)
	return k
}

func logKeyIndex(k []byte) (uint64, bool) {
	if len(k) != 9 || k[0] != prefixLog {
		return 0, false
	}
	return binary.BigEndian.Uint64(k[1:]), true
}

// prefixEnd returns the first key after every key with prefix p, or nil if
// there is none.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}
