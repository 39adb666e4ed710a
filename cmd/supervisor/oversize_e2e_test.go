package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
)

// TestOversizedRoundInputs: a StartRound whose additional_context,
// output_schema or images are over their bounds is refused, over the
// remote (a rejected verdict) and over the HTTP gateway (400), with the
// error naming the bound; one just under every bound is not refused for
// its size (the gateway's body limit is the remote's, so every field's
// own bound is reachable there too). The daemon serves a good round after.
func TestOversizedRoundInputs(t *testing.T) {
	b := newBinaryServe(t)
	t.Cleanup(func() { waitNoCodex(t, b.bin, b.root) })
	srv := opsStartServe(t, b.exe, append(b.args, "--gateway-listen", "127.0.0.1:0")...)
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	gw := "http://" + srv.waitMsg("gateway serving")["listen"].(string)
	srv.waitMsg("supervisor serving")
	big := filepath.Join(b.workspace, "big.png")
	if err := os.WriteFile(big, append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, messages.MaxImageLen)...), 0o644); err != nil {
		t.Fatal(err)
	}
	png := func(n int) messages.ImageInput {
		return messages.ImageInput{DataURL: "data:image/png;base64," + base64.StdEncoding.EncodeToString(make([]byte, n))}
	}
	schema := func(n int) string { return `{"d":"` + strings.Repeat("x", n-8) + `"}` }
	ctxEntries := func(n, each int) []messages.ContextEntry {
		var es []messages.ContextEntry
		for i := range n {
			es = append(es, messages.ContextEntry{Key: fmt.Sprintf("k%d", i), Value: strings.Repeat("v", each)})
		}
		return es
	}
	oc := opsNewCaller(t, b.addr, nil)
	n := 0
	for _, tt := range []struct {
		name string
		edit func(*messages.StartRound)
		want string // in the refusal; the bound
	}{
		{"output_schema", func(m *messages.StartRound) { m.OutputSchema = schema(messages.MaxOutputSchemaLen + 1) },
			fmt.Sprintf("output_schema is %d bytes, max %d", messages.MaxOutputSchemaLen+1, messages.MaxOutputSchemaLen)},
		{"additional_context bytes", func(m *messages.StartRound) { m.AdditionalContext = ctxEntries(2, messages.MaxContextLen/2+1) },
			fmt.Sprintf("additional_context values are %d bytes together, max %d", messages.MaxContextLen+2, messages.MaxContextLen)},
		{"additional_context entries", func(m *messages.StartRound) { m.AdditionalContext = ctxEntries(messages.MaxContextEntries+1, 1) },
			fmt.Sprintf("additional_context has %d entries, max %d", messages.MaxContextEntries+1, messages.MaxContextEntries)},
		{"one image", func(m *messages.StartRound) { m.Images = []messages.ImageInput{png(messages.MaxImageLen + 3)} },
			fmt.Sprintf("max %d", messages.MaxImageLen)},
		{"images together", func(m *messages.StartRound) {
			// Each at its own bound; their data URLs 13.3 MiB together.
			m.Images = []messages.ImageInput{png(messages.MaxImageLen), png(messages.MaxImageLen)}
		}, fmt.Sprintf("max %d", messages.MaxImagesLen)},
		{"images count", func(m *messages.StartRound) {
			for range messages.MaxImages + 1 {
				m.Images = append(m.Images, png(1))
			}
		}, fmt.Sprintf("images has %d images, max %d", messages.MaxImages+1, messages.MaxImages)},
		{"an image file", func(m *messages.StartRound) { m.Images = []messages.ImageInput{{Path: "big.png"}} },
			fmt.Sprintf("max %d", messages.MaxImageLen)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n++
			m := messages.StartRound{User: "ovy", Thread: fmt.Sprintf("o/%d", n), Text: "hi", RoundID: fmt.Sprintf("o-%d", n)}
			tt.edit(&m)
			// Over the remote.
			r := oc.round(m)
			if r.verdict.Status != messages.StatusRejected || !strings.Contains(r.verdict.Error, tt.want) {
				t.Errorf("remote: %s %q; want rejected naming %q", r.verdict.Status, r.verdict.Error, tt.want)
			}
			// Over the gateway, as JSON with the wire names.
			m.RoundID += "-gw"
			body, err := json.Marshal(wireJSON(t, m))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), opsRoundWait)
			defer cancel()
			resp := gwPost(t, ctx, gw+"/v1/rounds", string(body))
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), tt.want) {
				t.Errorf("gateway: %d %.300s; want 400 naming %q", resp.StatusCode, b, tt.want)
			}
		})
	}
	// At the bounds: not refused for size (the round runs).
	b.model.Enqueue(demomodel.Text("fine"))
	m := messages.StartRound{User: "ovy", Thread: "o/ok", Text: "hi", OutputSchema: schema(messages.MaxOutputSchemaLen),
		AdditionalContext: ctxEntries(2, messages.MaxContextLen/2)}
	if r := oc.round(m); r.verdict.Status == messages.StatusRejected {
		t.Errorf("a round at the bounds: %s %q", r.verdict.Status, r.verdict.Error)
	}
}

// wireJSON is m as the gateway reads it: a JSON object with the wire
// (msgpack) names.
func wireJSON(t *testing.T, m any) map[string]any {
	t.Helper()
	b, err := msgpack.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := msgpack.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
