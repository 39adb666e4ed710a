package codexrpc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// DefaultMaxLineBytes is the default cap on one line from the server. Lines
// over 1 MiB are normal (a command's aggregated output alone reaches that),
// so the cap is generous; it only guards memory against a runaway peer.
const DefaultMaxLineBytes = 64 << 20

// ErrLineTooLong reports a line longer than the reader's cap. The line has
// been skipped; reading may go on.
var ErrLineTooLong = errors.New("codexrpc: line exceeds the size cap")

// LineReader splits a stream into newline-terminated lines of any length up
// to a cap. Unlike bufio.Scanner it has no 64 KiB limit, and a line over the
// cap is skipped, not fatal.
type LineReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// NewLineReader returns a LineReader over r that accepts lines up to max
// bytes (DefaultMaxLineBytes when max <= 0).
func NewLineReader(r io.Reader, max int) *LineReader {
	if max <= 0 {
		max = DefaultMaxLineBytes
	}
	return &LineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// ReadLine returns the next line without its terminator ("\n" or "\r\n").
// The slice is valid until the next call. A line longer than the cap is
// consumed and reported as an error wrapping ErrLineTooLong; the caller may
// keep reading. At the end of the stream it returns io.EOF; a final line
// without a newline is returned first.
func (lr *LineReader) ReadLine() ([]byte, error) {
	chunk, err := lr.r.ReadSlice('\n')
	if err == nil && len(chunk) <= lr.max+2 {
		// The whole line is in the reader's buffer: no copy.
		return lr.complete(chunk)
	}
	lr.buf = lr.buf[:0]
	tooLong := false
	n := 0
	for ; ; chunk, err = lr.r.ReadSlice('\n') {
		n += len(chunk)
		if !tooLong {
			if n > lr.max+2 { // allow room for "\r\n"
				tooLong = true
				lr.buf = lr.buf[:0]
			} else {
				lr.buf = append(lr.buf, chunk...)
			}
		}
		switch {
		case err == nil:
			if tooLong {
				return nil, fmt.Errorf("%w: %d bytes over a cap of %d", ErrLineTooLong, n, lr.max)
			}
			return lr.complete(lr.buf)
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if tooLong || len(lr.buf) > lr.max { // no terminator to allow room for
				return nil, fmt.Errorf("%w: %d bytes over a cap of %d", ErrLineTooLong, n, lr.max)
			}
			if len(lr.buf) > 0 {
				return lr.buf, nil // the next call sees io.EOF with nothing left
			}
			return nil, io.EOF
		default:
			return nil, err
		}
	}
}

// complete returns a whole line (with its newline) without its
// terminator, or ErrLineTooLong.
func (lr *LineReader) complete(line []byte) ([]byte, error) {
	line = bytes.TrimSuffix(line, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	if len(line) > lr.max {
		return nil, fmt.Errorf("%w: %d bytes over a cap of %d", ErrLineTooLong, len(line), lr.max)
	}
	return line, nil
}

// Ready reports a whole line already buffered: the next ReadLine returns
// without reading (unless the line is over the buffer's size).
func (lr *LineReader) Ready() bool {
	b, _ := lr.r.Peek(lr.r.Buffered())
	return bytes.IndexByte(b, '\n') >= 0
}

// Shrink drops a buffer grown by an unusually long line, so one huge line
// does not pin its memory for the life of the connection.
func (lr *LineReader) shrink() {
	if cap(lr.buf) > 1<<20 {
		lr.buf = nil
	}
}
