package gateway

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/edge"
)

// TestErrorLogHandshakes: net/http's failed-handshake lines become Warn
// lines naming the peer and the reason, at most 10 a minute and then a
// count; its other lines stay at Debug.
func TestErrorLogHandshakes(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	e := &errorLog{log: slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})),
		sample: edge.NewSampler(10, time.Minute), now: func() time.Time { return now }}
	for i := range 15 {
		e.writer().Printf("http: TLS handshake error from 127.0.0.1:%d: remote error: tls: bad certificate", 40000+i)
	}
	e.writer().Println("http: superfluous response.WriteHeader call")
	now = now.Add(2 * time.Minute)
	e.writer().Println("http: TLS handshake error from 127.0.0.1:50000: EOF")
	var warns, debugs, summaries int
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		switch {
		case rec["msg"] == "gateway: TLS handshake refused":
			warns++
			if rec["level"] != "WARN" || !strings.HasPrefix(rec["peer"].(string), "127.0.0.1:") || rec["err"] == "" {
				t.Errorf("handshake line %v", rec)
			}
		case rec["msg"] == "gateway: TLS handshakes refused and not logged":
			summaries++
			if rec["count"] != float64(5) {
				t.Errorf("summary %v, want 5 left out", rec)
			}
		case rec["level"] == "DEBUG":
			debugs++
		}
	}
	if warns != 11 || summaries != 1 || debugs != 1 {
		t.Errorf("%d handshake lines, %d summaries, %d debug lines; want 11, 1, 1:\n%s", warns, summaries, debugs, buf.String())
	}
}
