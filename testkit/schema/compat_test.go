package schema_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/testkit/schema"
)

// miniBundle is a hand-made bundle in the generator's layout: per union,
// method → params definition (nil: no params); results by request method.
type miniBundle struct {
	requests, notifications, serverRequests map[string]any
	results                                 map[string]any // client request results, as v2/<Name>Response.json
	answers                                 map[string]any // server request results, at the top level
	noteDefs                                map[string]any // more definitions of ServerNotification.json
}

// write lays b out in a fresh directory and loads it.
func (b miniBundle) load(t *testing.T) *schema.Bundle {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	union := func(file string, methods map[string]any, more map[string]any) {
		defs := map[string]any{}
		for k, v := range more {
			defs[k] = v
		}
		var branches []any
		for m, params := range methods {
			props := map[string]any{"method": map[string]any{"enum": []any{m}, "type": "string"}}
			if params != nil {
				name := defName(m)
				defs[name+"Params"] = params
				props["params"] = map[string]any{"$ref": "#/definitions/" + name + "Params"}
			}
			branches = append(branches, map[string]any{"type": "object", "properties": props, "required": []any{"method"}})
		}
		if len(branches) == 0 { // the loader wants a union
			branches = append(branches, map[string]any{"properties": map[string]any{"method": map[string]any{"enum": []any{"none/" + file}}}})
		}
		writeJSON(t, filepath.Join(dir, file), map[string]any{"oneOf": branches, "definitions": defs})
	}
	union("ClientRequest.json", b.requests, nil)
	union("ClientNotification.json", map[string]any{"initialized": nil}, nil)
	union("ServerNotification.json", b.notifications, b.noteDefs)
	union("ServerRequest.json", b.serverRequests, nil)
	for m, s := range b.results {
		writeJSON(t, filepath.Join(dir, "v2", defName(m)+"Response.json"), s)
	}
	for m, s := range b.answers {
		writeJSON(t, filepath.Join(dir, defName(m)+"Response.json"), s)
	}
	bundle, err := schema.LoadBundle(dir)
	if err != nil {
		t.Fatal(err)
	}
	return bundle
}

// defName is "thing/do" → "ThingDo".
func defName(method string) string {
	var b strings.Builder
	for _, part := range strings.Split(method, "/") {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func obj(props map[string]any, required ...string) map[string]any {
	req := []any{}
	for _, r := range required {
		req = append(req, r)
	}
	return map[string]any{"type": "object", "properties": props, "required": req}
}

var (
	str  = map[string]any{"type": "string"}
	num  = map[string]any{"type": "integer"}
	mode = func(vals ...any) map[string]any { return map[string]any{"type": "string", "enum": vals} }
)

// The daemon's side of the hand-made protocol.
type (
	doParams struct {
		ID   string `json:"id"`
		Mode string `json:"mode"`
		Note string `json:"note,omitempty"`
	}
	doResult struct {
		Done  bool   `json:"done"`
		Count int    `json:"count"`
		Who   string `json:"who"`
	}
	pingNote struct {
		ID    string `json:"id"`
		State string `json:"state"`
		Inner struct {
			Size int64 `json:"size"`
		} `json:"inner"`
	}
	askParams struct {
		Question string `json:"question"`
	}
	askAnswer struct {
		Answer string `json:"answer"`
	}
)

var miniUses = []schema.Use{
	{Kind: schema.ClientRequest, Method: "thing/do", Sends: doParams{}, Reads: []any{doResult{}}},
	{Kind: schema.ClientNotification, Method: "initialized"},
	{Kind: schema.ServerNotification, Method: "thing/ping", Reads: []any{pingNote{}}},
	{Kind: schema.ServerRequest, Method: "thing/ask", Reads: []any{askParams{}}, Sends: askAnswer{}},
}

// base is the old bundle with the notification's inner.size typed by
// innerSize; each case changes a copy of it.
func base(innerSize any) miniBundle {
	return miniBundle{
		requests: map[string]any{
			"thing/do":    obj(map[string]any{"id": str, "mode": mode("fast", "slow"), "note": str}, "id", "mode"),
			"thing/other": obj(map[string]any{"x": str}),
		},
		results: map[string]any{
			"thing/do": obj(map[string]any{"done": map[string]any{"type": "boolean"}, "count": num, "who": map[string]any{"type": []any{"string", "null"}}}, "done"),
		},
		notifications: map[string]any{
			"thing/ping": obj(map[string]any{
				"id":    str,
				"state": mode("on", "off"),
				"inner": map[string]any{"$ref": "#/definitions/Inner"},
			}, "id"),
		},
		serverRequests: map[string]any{"thing/ask": obj(map[string]any{"question": str}, "question")},
		answers:        map[string]any{"thing/ask": obj(map[string]any{"answer": str}, "answer")},
		noteDefs:       map[string]any{"Inner": obj(map[string]any{"size": innerSize})},
	}
}

func TestCompareHandMade(t *testing.T) {
	type tc struct {
		name   string
		change func(b *miniBundle)
		inner  any      // the inner.size schema of the new bundle
		breaks []string // substrings, one per expected break, in any order
		adds   []string // substrings the additions must hold
	}
	cases := []tc{
		{name: "unchanged", change: func(*miniBundle) {}, inner: num},
		{name: "additions pass", change: func(b *miniBundle) {
			b.requests["thing/new"] = obj(map[string]any{"y": str}, "y")
			b.notifications["thing/newnote"] = obj(map[string]any{})
			req := b.requests["thing/do"].(map[string]any)
			req["properties"].(map[string]any)["extra"] = str // optional
			req["properties"].(map[string]any)["mode"] = mode("fast", "slow", "turbo")
			b.notifications["thing/ping"].(map[string]any)["properties"].(map[string]any)["state"] = mode("on", "off", "dim")
			b.results["thing/do"].(map[string]any)["properties"].(map[string]any)["more"] = str
		}, inner: num, adds: []string{
			"client request thing/new: new", "server notification thing/newnote: new",
			"thing/do: params.extra: new field", `thing/do: params.mode: new value "turbo"`,
			`thing/ping: params.state: new value "dim"`, "thing/do: result.more: new field",
		}},
		{name: "an unused method removed passes", change: func(b *miniBundle) { delete(b.requests, "thing/other") }, inner: num},
		{name: "a used request removed", change: func(b *miniBundle) { delete(b.requests, "thing/do") }, inner: num,
			breaks: []string{"client request thing/do: gone from the schema"}},
		{name: "a used notification removed", change: func(b *miniBundle) { delete(b.notifications, "thing/ping") }, inner: num,
			breaks: []string{"server notification thing/ping: gone from the schema"}},
		{name: "a sent param removed", change: func(b *miniBundle) {
			delete(b.requests["thing/do"].(map[string]any)["properties"].(map[string]any), "note")
		}, inner: num, breaks: []string{"thing/do: params.note: gone: the daemon sends it"}},
		{name: "a sent param retyped", change: func(b *miniBundle) {
			b.requests["thing/do"].(map[string]any)["properties"].(map[string]any)["id"] = num
		}, inner: num, breaks: []string{"thing/do: params.id: the schema wants integer"}},
		{name: "a new required param", change: func(b *miniBundle) {
			req := b.requests["thing/do"].(map[string]any)
			req["properties"].(map[string]any)["owner"] = str
			req["required"] = []any{"id", "mode", "owner"}
		}, inner: num, breaks: []string{"thing/do: params.owner: required, and the daemon does not send it"}},
		{name: "an omitempty param made required", change: func(b *miniBundle) {
			b.requests["thing/do"].(map[string]any)["required"] = []any{"id", "mode", "note"}
		}, inner: num, breaks: []string{"thing/do: params.note: required, and the daemon leaves it out when empty"}},
		{name: "a sent enum value removed", change: func(b *miniBundle) {
			b.requests["thing/do"].(map[string]any)["properties"].(map[string]any)["mode"] = mode("fast")
		}, inner: num, breaks: []string{`thing/do: params.mode: value "slow" gone`}},
		{name: "a read enum value removed passes", change: func(b *miniBundle) {
			b.notifications["thing/ping"].(map[string]any)["properties"].(map[string]any)["state"] = mode("on")
		}, inner: num},
		{name: "a read result field removed", change: func(b *miniBundle) {
			delete(b.results["thing/do"].(map[string]any)["properties"].(map[string]any), "count")
		}, inner: num, breaks: []string{"client request thing/do: result.count: gone: the daemon reads it"}},
		{name: "a read result field retyped", change: func(b *miniBundle) {
			b.results["thing/do"].(map[string]any)["properties"].(map[string]any)["who"] = map[string]any{"type": []any{"string", "object"}}
		}, inner: num, breaks: []string{"thing/do: result.who: the schema allows object|string"}},
		{name: "a nested notification field retyped", change: func(*miniBundle) {}, inner: str,
			breaks: []string{"server notification thing/ping: params.inner.size: the schema allows string"}},
		{name: "a server request's answer field removed", change: func(b *miniBundle) {
			b.answers["thing/ask"] = obj(map[string]any{"reply": str}, "reply")
		}, inner: num, breaks: []string{
			"server request thing/ask: result.answer: gone: the daemon sends it",
			"server request thing/ask: result.reply: required, and the daemon does not send it",
		}},
		{name: "a server request's read param removed", change: func(b *miniBundle) {
			b.serverRequests["thing/ask"] = obj(map[string]any{})
		}, inner: num, breaks: []string{"server request thing/ask: params.question: gone: the daemon reads it"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			old := base(num).load(t)
			nb := base(c.inner)
			c.change(&nb)
			r := schema.Compare(old, nb.load(t), miniUses)
			if len(r.Known) > 0 {
				t.Errorf("known problems %v: the old bundle fits the uses", r.Known)
			}
			var got []string
			for _, p := range r.Breaks {
				got = append(got, p.String())
			}
			if len(got) != len(c.breaks) {
				t.Fatalf("breaks %q, want %d: %q", got, len(c.breaks), c.breaks)
			}
			for _, want := range c.breaks {
				found := false
				for _, g := range got {
					found = found || strings.Contains(g, want)
				}
				if !found {
					t.Errorf("breaks %q lack %q", got, want)
				}
			}
			all := strings.Join(r.Additions, "\n")
			for _, want := range c.adds {
				if !strings.Contains(all, want) {
					t.Errorf("additions lack %q:\n%s", want, all)
				}
			}
		})
	}
}
