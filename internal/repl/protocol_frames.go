package repl

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
)

// AppendFrame appends the frame of m to dst:
//
//	frame := type(1) length(4 BE) payload crc32c(type || payload)(4 BE)
func AppendFrame(dst []byte, m Message) ([]byte, error) {
	start := len(dst)
	dst = append(dst, byte(m.Type()), 0, 0, 0, 0)
	dst = m.AppendPayload(dst)
	n := len(dst) - start - frameHeader
	if n > MaxPayload {
		return dst[:start], fmt.Errorf("%w: %s payload of %d bytes over the %d limit", ErrMalformed, m.Type(), n, MaxPayload)
	}
	binary.BigEndian.PutUint32(dst[start+1:], uint32(n))
	crc := crc32.Update(0, crcTable, dst[start:start+1])
	crc = crc32.Update(crc, crcTable, dst[start+frameHeader:])
	return binary.BigEndian.AppendUint32(dst, crc), nil
}

// WriteMessage writes m as one frame with one Write call.
func WriteMessage(w io.Writer, m Message) error {
	buf, err := AppendFrame(nil, m)
	if err != nil {
		return err
	}
	_, err = w.Write(buf)
	return err
}

// ReadFrame reads one frame and checks its length limit and checksum. It
// returns io.EOF only if r ended cleanly before the frame; a frame cut
// short gives io.ErrUnexpectedEOF. The payload is freshly allocated, grown
// as bytes arrive, so a corrupted length costs no memory up front.
func ReadFrame(r io.Reader) (MsgType, []byte, error) {
	var fr frameReader
	t, p, err := fr.next(r)
	return t, p[:len(p):len(p)], err
}

// frameReader reads frames into one reused buffer: a payload is valid
// until the next call. The buffer grows only as bytes actually arrive.
type frameReader struct {
	buf []byte
	// limit is the largest payload accepted; 0: MaxPayload.
	limit uint32
}

func (fr *frameReader) next(r io.Reader) (MsgType, []byte, error) {
	var hdr [frameHeader]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	t := MsgType(hdr[0])
	n := binary.BigEndian.Uint32(hdr[1:])
	limit := uint32(MaxPayload)
	if fr.limit > 0 {
		limit = fr.limit
	}
	if n > limit {
		return 0, nil, fmt.Errorf("%w: frame of %d bytes over the %d limit", ErrMalformed, n, limit)
	}
	want := int(n) + frameTrailer
	b := fr.buf[:0]
	for len(b) < want {
		if len(b) == cap(b) {
			b = append(b, make([]byte, min(max(cap(b), 64<<10), want-len(b)))...)[:len(b)]
		}
		k, err := io.ReadFull(r, b[len(b):min(cap(b), want)])
		b = b[:len(b)+k]
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, nil, err
		}
	}
	fr.buf = b
	payload, sum := b[:n], binary.BigEndian.Uint32(b[n:])
	crc := crc32.Update(0, crcTable, hdr[:1])
	crc = crc32.Update(crc, crcTable, payload)
	if crc != sum {
		return 0, nil, fmt.Errorf("%w: %s frame of %d bytes", ErrChecksum, t, n)
	}
	return t, payload, nil
}

// message reads and decodes one message; it may alias the buffer.
func (fr *frameReader) message(r io.Reader) (Message, error) {
	t, p, err := fr.next(r)
	if err != nil {
		return nil, err
	}
	return DecodePayload(t, p)
}

// ReadHello reads and decodes a connection's first message, refusing a
// frame over MaxHelloPayload before reading its payload.
func ReadHello(r io.Reader) (Message, error) {
	fr := frameReader{limit: MaxHelloPayload}
	return fr.message(r)
}

// ReadMessage reads and decodes one message.
func ReadMessage(r io.Reader) (Message, error) {
	t, p, err := ReadFrame(r)
	if err != nil {
		return nil, err
	}
	return DecodePayload(t, p)
}
