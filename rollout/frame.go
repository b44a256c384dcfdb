package rollout

import (
	"encoding/binary"
	"hash/crc32"
	"io"
	"slices"
	"sync"

	"github.com/cockroachdb/errors"
	"github.com/klauspost/compress/zstd"
)

// A frame: a 48-byte header, then the payload. Little-endian:
//
//	 0      4        8     9     10      12       16       20        28    36        44       48
//	 +------+--------+-----+-----+-------+--------+--------+---------+-----+---------+--------+---------+
//	 |magic | hdr crc|flags| 0   | count | length | rawlen | file id | seq | durable | data crc| payload |
//	 | 4    | u32    | u8  | u8  | u16   | u32    | u32    | u64     | u64 | u64     | u32    | length  |
//	 +------+--------+-----+-----+-------+--------+--------+---------+-----+---------+--------+---------+
//
//   - magic: the sync word FE 52 46 FF ("\xfeRF\xff"; 0xFE and 0xFF never
//     occur in UTF-8 text) that lets a reader find the next frame after damage.
//   - hdr crc: CRC-32C of bytes [8,48). A header that checks makes the length
//     trustworthy, so a frame whose payload alone is damaged is skipped exactly.
//   - flags: bit 0, payload is zstd-compressed. Other bits must be zero.
//   - count: records in the frame, 1..MaxRecordsPerFrame.
//   - length: stored payload bytes; rawlen: payload bytes after decompression
//     (equal to length when not compressed). Both <= MaxFrameSize.
//   - file id: the file header's id.
//   - seq: the first record's seq; the frame holds seq..seq+count-1.
//   - durable: an offset of this file known fsynced when the frame was
//     written. Damage below a later frame's durable offset destroyed
//     acknowledged data.
//   - data crc: CRC-32C of the stored payload.
//
// The payload is count record envelopes back to back (see envelope.go).

// Frame bounds. A reader refuses anything larger before allocating.
const (
	FrameHeaderSize    = 48
	MaxFrameSize       = 16 << 20 // payload bytes, stored and decompressed
	MaxRecordsPerFrame = 1<<16 - 1
	minEnvelopeSize    = 1 + 1 + 9 + 1 + 2 // 0x94, kind, time, turn, empty body: a bound on count
)

const flagZstd = 1 << 0

var frameMagic = [4]byte{0xfe, 'R', 'F', 0xff}

// FrameHeader is a decoded frame header.
type FrameHeader struct {
	Flags   uint8
	Count   int
	Length  int // stored payload length
	RawLen  int // decoded payload length
	FileID  uint64
	Seq     uint64
	Durable int64
	DataCRC uint32
}

func (h *FrameHeader) Put(b []byte) {
	copy(b[0:4], frameMagic[:])
	b[8] = h.Flags
	b[9] = 0
	binary.LittleEndian.PutUint16(b[10:], uint16(h.Count))
	binary.LittleEndian.PutUint32(b[12:], uint32(h.Length))
	binary.LittleEndian.PutUint32(b[16:], uint32(h.RawLen))
	binary.LittleEndian.PutUint64(b[20:], h.FileID)
	binary.LittleEndian.PutUint64(b[28:], h.Seq)
	binary.LittleEndian.PutUint64(b[36:], uint64(h.Durable))
	binary.LittleEndian.PutUint32(b[44:], h.DataCRC)
	binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(b[8:FrameHeaderSize], castagnoli))
}

// ReadFrameHeader reads and checks the frame header at off. A header that
// fails its checks is a *CorruptionError. It lets a caller that remembers a
// frame (its offset, seq and DataCRC) check that the file still holds it.
func ReadFrameHeader(src io.ReaderAt, off int64) (FrameHeader, error) {
	b := make([]byte, FrameHeaderSize)
	if n, err := src.ReadAt(b, off); n < FrameHeaderSize {
		if err == nil || err == io.EOF {
			return FrameHeader{}, &CorruptionError{Offset: off, Reason: ReasonTruncated}
		}
		return FrameHeader{}, errors.Wrapf(err, "read frame header at %d", off)
	}
	h, reason := ParseFrameHeader(b)
	if reason != "" {
		return h, &CorruptionError{Offset: off, Length: FrameHeaderSize, Reason: reason}
	}
	return h, nil
}

// ParseFrameHeader checks and decodes a frame header. It returns the reason
// a header is rejected; it does not look at the payload.
func ParseFrameHeader(b []byte) (FrameHeader, Reason) {
	if [4]byte(b[0:4]) != frameMagic {
		if allZero(b[:FrameHeaderSize]) {
			return FrameHeader{}, ReasonZeros
		}
		return FrameHeader{}, ReasonBadMagic
	}
	if crc32.Checksum(b[8:FrameHeaderSize], castagnoli) != binary.LittleEndian.Uint32(b[4:]) {
		return FrameHeader{}, ReasonHeaderChecksum
	}
	h := FrameHeader{
		Flags:   b[8],
		Count:   int(binary.LittleEndian.Uint16(b[10:])),
		Length:  int(binary.LittleEndian.Uint32(b[12:])),
		RawLen:  int(binary.LittleEndian.Uint32(b[16:])),
		FileID:  binary.LittleEndian.Uint64(b[20:]),
		Seq:     binary.LittleEndian.Uint64(b[28:]),
		Durable: int64(binary.LittleEndian.Uint64(b[36:])),
		DataCRC: binary.LittleEndian.Uint32(b[44:]),
	}
	switch {
	case h.Flags&^flagZstd != 0 || b[9] != 0:
		return h, ReasonBadLength
	case h.Count == 0 || h.Length == 0 || h.Length > MaxFrameSize || h.RawLen > MaxFrameSize:
		return h, ReasonBadLength
	case h.Flags&flagZstd == 0 && h.RawLen != h.Length:
		return h, ReasonBadLength
	case h.Count*minEnvelopeSize > h.RawLen:
		return h, ReasonBadLength
	case h.Seq == 0 || h.Seq > 1<<62 || h.Durable < 0:
		return h, ReasonBadLength
	}
	return h, ""
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

var (
	zstdOnce sync.Once
	zstdEnc  *zstd.Encoder
	zstdDec  *zstd.Decoder
)

func zstdCodec() (*zstd.Encoder, *zstd.Decoder) {
	zstdOnce.Do(func() {
		var err error
		zstdEnc, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
		if err != nil {
			panic(err) // static options
		}
		// The decoder never allocates past MaxFrameSize: DecodeAll is capped
		// at the capacity of the destination, which is the checked rawlen.
		zstdDec, err = zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(0),
			zstd.WithDecoderMaxMemory(MaxFrameSize),
			zstd.WithDecoderMaxWindow(MaxFrameSize),
			zstd.WithDecodeAllCapLimit(true))
		if err != nil {
			panic(err)
		}
	})
	return zstdEnc, zstdDec
}

// encodeFrame appends a frame holding recs to dst. Records must have Seq
// set (consecutive from recs[0].Seq) and Time set. compressAbove <= 0
// disables compression; otherwise payloads of at least that many bytes are
// compressed when it saves at least an eighth.
func encodeFrame(dst []byte, fileID uint64, durable int64, recs []Record, compressAbove int) ([]byte, error) {
	start := len(dst)
	dst, h, err := encodePayload(dst, recs, compressAbove)
	if err != nil {
		return dst, err
	}
	h.FileID, h.Seq, h.Durable = fileID, recs[0].Seq, durable
	h.Put(dst[start:])
	return dst, nil
}

// encodePayload is the part of a frame that does not depend on where it
// goes: it appends FrameHeaderSize bytes to fill later (sealFrame) and the
// payload, and returns the header with its lengths, flags and payload CRC
// set. It is the costly part (envelopes, compression, CRC), done by a writer
// outside its lock; the seq and durable offset are set under it.
func encodePayload(dst []byte, recs []Record, compressAbove int) ([]byte, FrameHeader, error) {
	if len(recs) == 0 || len(recs) > MaxRecordsPerFrame {
		return dst, FrameHeader{}, errors.Wrapf(ErrTooLarge, "%d records in one frame, want 1..%d", len(recs), MaxRecordsPerFrame)
	}
	size := 0
	for i := range recs {
		r := &recs[i]
		if len(r.Kind) == 0 || len(r.Kind) > MaxKindLen || len(r.Turn) > MaxTurnLen {
			return dst, FrameHeader{}, errors.Newf("rollout: record %d: kind must be 1..%d bytes and turn at most %d", i, MaxKindLen, MaxTurnLen)
		}
		size += envelopeSize(r)
	}
	if size > MaxFrameSize {
		return dst, FrameHeader{}, errors.WithHint(
			errors.Wrapf(ErrTooLarge, "frame payload of %d bytes, limit %d", size, MaxFrameSize),
			"large blobs belong in artifacts; the item keeps a reference")
	}
	start := len(dst)
	dst = slices.Grow(dst, FrameHeaderSize+size)
	dst = append(dst, make([]byte, FrameHeaderSize)...)
	for i := range recs {
		dst = appendEnvelope(dst, &recs[i])
	}
	raw := dst[start+FrameHeaderSize:]
	h := FrameHeader{Count: len(recs), Length: len(raw), RawLen: len(raw)}
	if compressAbove > 0 && len(raw) >= compressAbove {
		enc, _ := zstdCodec()
		c := enc.EncodeAll(raw, make([]byte, 0, len(raw)))
		if len(c) <= len(raw)-len(raw)/8 {
			dst = append(dst[:start+FrameHeaderSize], c...)
			h.Flags |= flagZstd
			h.Length = len(c)
		}
	}
	h.DataCRC = crc32.Checksum(dst[start+FrameHeaderSize:], castagnoli)
	return dst, h, nil
}

// decodePayload checks the payload CRC, decompresses and decodes the frame's
// records. The records' bodies alias the returned memory, which is not
// reused. Any failure is a reason for the frame to be skipped.
func decodePayload(h *FrameHeader, payload []byte) ([]Record, Reason, error) {
	return decodePayloadInto(h, payload, nil, "")
}

// decodePayloadInto is decodePayload reusing dst's array for the records
// (a reader hands records out by value, so it reuses one slice), and
// giving records of the same turn as the one before them (prevTurn for the
// first) one string.
func decodePayloadInto(h *FrameHeader, payload []byte, dst []Record, prevTurn string) ([]Record, Reason, error) {
	if crc32.Checksum(payload, castagnoli) != h.DataCRC {
		return nil, ReasonPayloadCRC, errors.New("payload checksum mismatch")
	}
	raw := payload
	if h.Flags&flagZstd != 0 {
		_, dec := zstdCodec()
		out, err := dec.DecodeAll(payload, make([]byte, 0, h.RawLen))
		if err != nil {
			return nil, ReasonDecode, errors.Wrap(err, "zstd")
		}
		if len(out) != h.RawLen {
			return nil, ReasonDecode, errors.Newf("zstd: %d bytes, header says %d", len(out), h.RawLen)
		}
		raw = out
	}
	var recs []Record
	if cap(dst) >= h.Count {
		recs = dst[:h.Count]
		clear(recs)
	} else {
		recs = make([]Record, h.Count)
	}
	var err error
	for i := range recs {
		if i > 0 {
			prevTurn = recs[i-1].Turn
		}
		if raw, err = decodeEnvelope(raw, &recs[i], prevTurn); err != nil {
			return nil, ReasonDecode, errors.Wrapf(err, "record %d of %d", i, h.Count)
		}
		recs[i].Seq = h.Seq + uint64(i)
	}
	if len(raw) != 0 {
		return nil, ReasonDecode, errors.Newf("%d trailing payload bytes", len(raw))
	}
	return recs, "", nil
}

// DecodeFrame decodes one whole frame from the front of b, checking it
// belongs to the file with the given id (0 accepts any). It is the frame
// decoder on its own, for tools and fuzzing; the Reader does the same while
// streaming a file.
func DecodeFrame(b []byte, fileID uint64) (FrameHeader, []Record, error) {
	if len(b) < FrameHeaderSize {
		return FrameHeader{}, nil, &CorruptionError{Length: int64(len(b)), Reason: ReasonTruncated}
	}
	h, reason := ParseFrameHeader(b)
	if reason != "" {
		return h, nil, &CorruptionError{Length: int64(len(b)), Reason: reason}
	}
	if fileID != 0 && h.FileID != fileID {
		return h, nil, &CorruptionError{Length: int64(len(b)), Reason: ReasonFileID}
	}
	if len(b)-FrameHeaderSize < h.Length {
		return h, nil, &CorruptionError{Length: int64(len(b)), Reason: ReasonTruncated}
	}
	recs, reason, err := decodePayload(&h, b[FrameHeaderSize:FrameHeaderSize+h.Length])
	if err != nil {
		return h, nil, errors.Wrap(&CorruptionError{Length: int64(FrameHeaderSize + h.Length), Reason: reason, FirstSeq: h.Seq, LastSeq: h.Seq + uint64(h.Count) - 1}, err.Error())
	}
	return h, recs, nil
}
