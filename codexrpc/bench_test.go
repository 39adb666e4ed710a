package codexrpc

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"
)

// testdata/stream.jsonl is what a real codex app-server 0.169.0 wrote during
// a shell scenario (the "out" messages of the s03_shell transcript: two
// command turns, a failing command, a file write), one message per line as on
// the wire.
const streamFile = "testdata/stream.jsonl"

func loadStream(tb testing.TB) (data []byte, lines, notifications int) {
	tb.Helper()
	data, err := os.ReadFile(streamFile)
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		msg, err := DecodeMessage(line)
		if err != nil {
			tb.Fatalf("%s: %v: %s", streamFile, err, head(line, 100))
		}
		lines++
		if _, ok := msg.(*Notification); ok {
			notifications++
		}
	}
	return data, lines, notifications
}

// repeatReader reads data n times over, in reads of at most 32 KiB (a pipe's
// typical chunk).
type repeatReader struct {
	data []byte
	n    int
	off  int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	if len(p) > 32<<10 {
		p = p[:32<<10]
	}
	k := copy(p, r.data[r.off:])
	r.off += k
	if r.off == len(r.data) {
		r.off = 0
		r.n--
	}
	return k, nil
}

type discardCloser struct{}

func (discardCloser) Write(p []byte) (int, error) { return len(p), nil }
func (discardCloser) Close() error                { return nil }

func TestStreamFixture(t *testing.T) {
	_, lines, notes := loadStream(t)
	if lines < 50 || notes < lines-10 {
		t.Errorf("%s: %d lines, %d notifications; expected a recorded turn stream", streamFile, lines, notes)
	}
}

// BenchmarkReadPath replays the recorded stream through a Conn: lines are
// split, decoded, and notifications dispatched to OnNotification (which
// does what a cheap handler does: look at the method). Responses match no
// pending call and are dropped, as late answers are.
func BenchmarkReadPath(b *testing.B) {
	data, lines, notes := loadStream(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	var got int
	b.ResetTimer()
	c := NewConn(&repeatReader{data: data, n: b.N}, discardCloser{}, Options{
		Logger: slog.New(slog.DiscardHandler),
		OnNotification: func(n *Notification) {
			if n.Method != "" {
				got++
			}
		},
	})
	<-c.Done() // the read goroutine ends at the end of the stream
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Wait(ctx); err != nil {
		b.Fatal(err)
	}
	if got != notes*b.N {
		b.Fatalf("dispatched %d notifications, want %d", got, notes*b.N)
	}
	b.ReportMetric(float64(lines*b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkBareLineRead reads the same bytes with LineReader alone: the
// floor the read path is measured against.
func BenchmarkBareLineRead(b *testing.B) {
	data, lines, _ := loadStream(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	lr := NewLineReader(&repeatReader{data: data, n: b.N}, 0)
	n := 0
	for {
		_, err := lr.ReadLine()
		if err == io.EOF {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.StopTimer()
	if n != lines*b.N {
		b.Fatalf("read %d lines, want %d", n, lines*b.N)
	}
	b.ReportMetric(float64(lines*b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// deltaLine is the most frequent line of a turn.
const deltaLine = `{"method":"item/agentMessage/delta","params":{"threadId":"019a236e-a80d-7660-b6b5-cfa3e35fe0ad","turnId":"019a236e-a80d-7660-b6b5-cfa3e35fe0ae","itemId":"msg_0a1b2c3d4e5f","delta":" the"}}`

// BenchmarkDecode decodes the recorded stream's lines and a delta line,
// by DecodeMessage's decoder and by encoding/json (its fallback and the
// decoder it replaced), in one run so load hits both alike.
func BenchmarkDecode(b *testing.B) {
	stream := streamLines(b)
	var size int
	for _, l := range stream {
		size += len(l)
	}
	for _, in := range []struct {
		name  string
		lines [][]byte
		bytes int
	}{{"stream", stream, size}, {"delta", [][]byte{[]byte(deltaLine)}, len(deltaLine)}} {
		var d decoder
		for _, dec := range []struct {
			name string
			fn   func([]byte) (Message, error)
		}{{"scan", d.decode}, {"json", decodeJSON}} {
			b.Run(in.name+"/"+dec.name, func(b *testing.B) {
				b.SetBytes(int64(in.bytes))
				b.ReportAllocs()
				for b.Loop() {
					for _, l := range in.lines {
						if _, err := dec.fn(l); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportMetric(float64(len(in.lines)*b.N)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}
