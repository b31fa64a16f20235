package repl

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Reports: a replica tells its source what it and the nodes below it are
// doing (internal/tree), on the stream connection itself.
//
// A stream client that sends a Hello of version ReportVersion or later may
// send Report messages on the connection after the Welcome (a Welcome of
// that version). The server reads them while it streams; any other message
// still ends the stream. A server of an older version refuses the Hello
// with code "version": the client then speaks version 1 to that source and
// sends no reports to it.
const (
	// ReportVersion is the first protocol version with reports.
	ReportVersion uint16 = 3
	// MaxReportBytes bounds one report's body. A larger one is skipped
	// (its bytes read and thrown away) and counted; the stream goes on.
	MaxReportBytes = 1 << 20
	// MsgReport carries one report, client → server, on stream
	// connections of version ReportVersion or later.
	MsgReport MsgType = 12
)

// Report is one report of a replica to its source: an opaque document
// (internal/tree) the server hands to its ReportSink.
//
//	payload := body (at most MaxReportBytes)
type Report struct {
	Body []byte
}

func (*Report) Type() MsgType                     { return MsgReport }
func (m *Report) AppendPayload(dst []byte) []byte { return append(dst, m.Body...) }

func decodeReport(p []byte) (*Report, error) {
	if len(p) > MaxReportBytes {
		return nil, fmt.Errorf("%w: report of %d bytes over %d", ErrMalformed, len(p), MaxReportBytes)
	}
	return &Report{Body: append([]byte(nil), p...)}, nil
}

// ReportSink takes the body of a report received from client from for
// database db. Its error (a report it could not use) is counted and
// logged; the stream goes on.
type ReportSink func(db string, from ProcessID, body []byte) error

// Reasons a server drops a report (label "reason" of reports_dropped_total).
const (
	dropRate     = "rate"      // sooner than ReportMinInterval after the previous one
	dropTooLarge = "too_large" // body over MaxReportBytes
	dropInvalid  = "invalid"   // the sink refused it
	dropNoSink   = "no_sink"   // the server takes no reports
)

// readReports reads the messages a stream client sends after its Hello:
// Reports, handed to the sink, until the connection ends or the client
// sends anything else.
func (cn *conn) readReports(r *bufio.Reader, h *Hello, log *slog.Logger) {
	var last time.Time
	minGap, ms := cn.s.cfg.ReportMinInterval, cn.s.cfg.Metrics
	for {
		t, body, err := readBoundedFrame(r, MaxReportBytes)
		var big *tooLargeError
		switch {
		case errors.As(err, &big) && t == MsgReport:
			ms.reportsDropped.WithLabelValues(dropTooLarge).Inc()
			log.Warn("replication client sent a report over the size limit; dropped", "bytes", big.n, "limit", MaxReportBytes)
			continue
		case err != nil:
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				log.Info("replication client stream ended", "err", err)
			}
			return
		case t != MsgReport:
			log.Info("replication client sent data after hello; closing", "type", t.String())
			return
		}
		now := time.Now()
		if !last.IsZero() && now.Sub(last) < minGap {
			ms.reportsDropped.WithLabelValues(dropRate).Inc()
			continue
		}
		last = now
		if cn.s.cfg.Reports == nil {
			ms.reportsDropped.WithLabelValues(dropNoSink).Inc()
			continue
		}
		if err := cn.s.cfg.Reports(h.Database, h.ProcessID, body); err != nil {
			ms.reportsDropped.WithLabelValues(dropInvalid).Inc()
			log.Warn("replication client sent a report this server cannot use; dropped", "err", err)
			continue
		}
		ms.reportsReceived.WithLabelValues(h.Database).Inc()
	}
}

// tooLargeError: a frame whose length is over the reader's limit; its
// bytes were read and thrown away, so the next frame can be read.
type tooLargeError struct{ n uint32 }

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("%v: frame of %d bytes over the limit", ErrMalformed, e.n)
}

// readBoundedFrame reads one frame whose payload is at most limit bytes,
// checking its CRC. A longer frame is skipped whole and reported as a
// *tooLargeError with its type, so that a client cannot make the server
// hold more than limit bytes for it.
func readBoundedFrame(r io.Reader, limit int) (MsgType, []byte, error) {
	var hdr [frameHeader]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	t := MsgType(hdr[0])
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxPayload {
		return t, nil, fmt.Errorf("%w: frame of %d bytes over the %d limit", ErrMalformed, n, MaxPayload)
	}
	if int64(n) > int64(limit) {
		if _, err := io.CopyN(io.Discard, r, int64(n)+frameTrailer); err != nil {
			return t, nil, err
		}
		return t, nil, &tooLargeError{n: n}
	}
	b := make([]byte, int(n)+frameTrailer)
	if _, err := io.ReadFull(r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return t, nil, err
	}
	payload, sum := b[:n], binary.BigEndian.Uint32(b[n:])
	crc := crc32.Update(0, crcTable, hdr[:1])
	if crc32.Update(crc, crcTable, payload) != sum {
		return t, nil, fmt.Errorf("%w: %s frame of %d bytes", ErrChecksum, t, n)
	}
	return t, payload, nil
}

// legacyRetry is how long a replica speaks an older version to a source
// that refused a newer one before it tries replicaVersion again (the
// source may have been upgraded meanwhile).
const legacyRetry = 10 * time.Minute

// legacySource is a source that refused a version: when, and the version
// to speak to it (fallbackVersion).
type legacySource struct {
	at      time.Time
	version uint16
}

// helloVersion is the version of the Hello a stream session sends to src:
// replicaVersion, or the older version chosen when src refused a newer
// one in the last legacyRetry.
func (r *Replica) helloVersion(src string) uint16 {
	if v, ok := r.legacy.Load(src); ok && time.Since(v.(legacySource).at) < legacyRetry {
		return v.(legacySource).version
	}
	return replicaVersion
}

// startReports sends the replica's report on c every ReportInterval until
// the returned stop is called (it waits for the sender to end). It sends
// nothing when the replica has no Report function.
func (r *Replica) startReports(ctx context.Context, c net.Conn) (stop func()) {
	if r.cfg.Report == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(r.cfg.ReportInterval)
		defer t.Stop()
		var buf []byte
		for {
			body := r.cfg.Report()
			switch {
			case len(body) > MaxReportBytes:
				r.cfg.Metrics.reportsUnsent.WithLabelValues(r.cfg.Database, dropTooLarge).Inc()
				r.log.Warn("report over the size limit not sent", "bytes", len(body), "limit", MaxReportBytes)
			case body != nil:
				var err error
				if buf, err = AppendFrame(buf[:0], &Report{Body: body}); err == nil {
					c.SetWriteDeadline(time.Now().Add(r.cfg.HandshakeTimeout))
					_, err = c.Write(buf)
				}
				if err != nil {
					// The stream's reader sees the broken connection.
					r.cfg.Metrics.reportsUnsent.WithLabelValues(r.cfg.Database, "write").Inc()
					r.log.Debug("report not sent", "err", err)
					return
				}
				r.cfg.Metrics.reportsSent.WithLabelValues(r.cfg.Database).Inc()
			}
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() {
		cancel()
		c.SetWriteDeadline(time.Now()) // a write in progress ends now
		wg.Wait()
	}
}
