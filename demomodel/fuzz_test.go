package demomodel_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/meshweaver/supervisor/demomodel"
)

// FuzzRequestHelpers checks that the Request helpers and DemoResponder never
// panic, whatever the CLI (or a broken client) sends.
func FuzzRequestHelpers(f *testing.F) {
	f.Add([]byte(`{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}`), `{"request_kind":"turn"}`)
	f.Add([]byte(`{"type":"function_call_output","call_id":"c","output":[{"text":1}]}`), `{"request_kind":"compaction"}`)
	f.Add([]byte(`{"type":"message","role":"user","content":"plain"}`), `null`)
	f.Add([]byte(`[1,2,3]`), `{"request_kind":7}`)
	f.Add([]byte(`null`), ``)
	f.Add([]byte(`{"name":null,"type":{}}`), `{`)
	f.Fuzz(func(t *testing.T, item []byte, metadata string) {
		r := &demomodel.Request{Header: http.Header{}}
		r.Header.Set(demomodel.TurnMetadataHeader, metadata)
		if json.Valid(item) {
			r.Input = []json.RawMessage{item, item}
			r.Tools = []json.RawMessage{item}
		}
		_ = r.LastUserText()
		_ = r.UserTexts()
		_ = r.FunctionCallOutputs()
		_ = r.LastInputType()
		_ = r.ToolNames()
		_ = r.HasTool("x")
		_ = r.RequestKind()
		_ = r.TurnMetadata()
		sc := demomodel.DemoResponder(r)
		if len(sc.Events) == 0 {
			t.Fatal("DemoResponder gave no events")
		}
	})
}
