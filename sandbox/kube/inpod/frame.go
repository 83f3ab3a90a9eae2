package inpod

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
)

// Kinds of frame the helper writes to its stdout.
const (
	FrameStdout  byte = 'o' // a chunk of the command's stdout
	FrameStderr  byte = 'e' // a chunk of the command's stderr
	FrameEntry   byte = 'f' // an Entry, as JSON
	FrameContent byte = 'c' // a chunk of the content of the file of the Entry before it
	// FrameKnown: the file of a line of the input's known section (its
	// number from 0, in decimal) is as that line says; many files cost
	// a few bytes each.
	FrameKnown byte = 'k'
	// FrameAsk ends a batch of changes' entries: the helper waits for the
	// server's requests (AskRead, AskGoOn).
	FrameAsk byte = 'a'
	// FrameSections is changes' first frame when it was given digests of
	// its input's sections: it names those the server must still send,
	// 'm' for the manifest and 'k' for the known files, the others being
	// held by the container's main process from an earlier capture.
	FrameSections byte = 'h'
	FrameStatus   byte = 's' // the verb's final status, as JSON
)

// MaxChunk is the most an output or content frame carries, so the server
// can bound its reader well below what it accepts in total.
const MaxChunk = 32 << 10

const headerSize = 5 // kind, then a big-endian uint32 length

// Sentinel errors of the codec and of the verbs' arguments.
var (
	ErrFrameTooLarge = errors.New("inpod: frame over the size limit")
	ErrBadArgs       = errors.New("inpod: bad arguments")
	ErrBadPath       = errors.New("inpod: bad path")
)

// WriteFrame writes one frame: kind, length, payload.
func WriteFrame(w io.Writer, kind byte, p []byte) error {
	if uint64(len(p)) > math.MaxUint32 {
		return fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, len(p))
	}
	var hdr [headerSize]byte
	hdr[0] = kind
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(p)))
	if _, err := w.Write(hdr[:]); err != nil {
		return fmt.Errorf("inpod: write frame: %w", err)
	}
	if _, err := w.Write(p); err != nil {
		return fmt.Errorf("inpod: write frame: %w", err)
	}
	return nil
}

// FrameReader reads frames written by the helper, which the session's code
// may have tampered with: it never allocates more than maxPayload bytes,
// whatever a header claims.
type FrameReader struct {
	r   io.Reader
	max int
	hdr [headerSize]byte
	buf []byte
}

// NewFrameReader reads frames from r whose payloads hold at most
// maxPayload bytes.
func NewFrameReader(r io.Reader, maxPayload int) *FrameReader {
	return &FrameReader{r: r, max: max(maxPayload, 0)}
}

// Next returns the next frame. The payload is valid only until the next
// call, which reuses its buffer. At the end of a stream between frames it
// returns io.EOF; a stream cut inside a frame is io.ErrUnexpectedEOF.
func (fr *FrameReader) Next() (kind byte, payload []byte, err error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		if err == io.EOF {
			return 0, nil, io.EOF
		}
		return 0, nil, fmt.Errorf("inpod: read frame header: %w", err)
	}
	n := uint64(binary.BigEndian.Uint32(fr.hdr[1:]))
	if n > uint64(fr.max) {
		return 0, nil, fmt.Errorf("%w: %d bytes, at most %d", ErrFrameTooLarge, n, fr.max)
	}
	if uint64(cap(fr.buf)) < n {
		fr.buf = make([]byte, n)
	}
	fr.buf = fr.buf[:n]
	if _, err := io.ReadFull(fr.r, fr.buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, fmt.Errorf("inpod: read frame payload: %w", err)
	}
	return fr.hdr[0], fr.buf, nil
}

// frameWriter serialises the frames of the goroutines that share the
// helper's stdout, and remembers the first failure: once the server has
// gone, nothing more is worth writing.
type frameWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
	// eager sends each frame at once, for a command's output, which the
	// server shows as it comes; the walks send theirs in bulk.
	eager bool
	err   error
}

func newFrameWriter(w io.Writer, eager bool) *frameWriter {
	return &frameWriter{w: bufio.NewWriterSize(w, 64<<10), eager: eager}
}

func (fw *frameWriter) frame(kind byte, p []byte) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.err == nil {
		fw.err = WriteFrame(fw.w, kind, p)
	}
	if fw.err == nil && fw.eager {
		fw.err = fw.w.Flush()
	}
	return fw.err
}

func (fw *frameWriter) flush() error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.err == nil {
		fw.err = fw.w.Flush()
	}
	return fw.err
}

// chunks writes p as frames of at most MaxChunk bytes.
func (fw *frameWriter) chunks(kind byte, p []byte) error {
	for len(p) > 0 {
		n := min(len(p), MaxChunk)
		if err := fw.frame(kind, p[:n]); err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

// json writes v as one frame of JSON.
func (fw *frameWriter) json(kind byte, v any) error {
	b, err := marshal(v)
	if err != nil {
		return err
	}
	return fw.frame(kind, b)
}
