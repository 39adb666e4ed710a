package messages

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestRedaction(t *testing.T) {
	round := StartRound{
		RoundID: "r-1", User: "u1", Thread: "t1", Text: "TEXT-SECRET",
		DeveloperInstructions: "INSTR-SECRET",
		MCPURL:                "https://user:PASS-SECRET@mesh.example/mcp?key=QUERY-SECRET#FRAG-SECRET",
		MCPToken:              "TOKEN-SECRET",
		History:               []Turn{{Role: RoleUser, Text: "HIST-SECRET"}},
		ReplyTo:               &PID{Address: "127.0.0.1:4001", ID: "mesh/c"},
	}
	key := SetAPIKey{User: "u1", APIKey: "sk-KEY-SECRET"}
	warm := WarmUp{User: "u1", Thread: "t1", DeveloperInstructions: "INSTR-SECRET",
		MCPURL: "https://user:PASS-SECRET@mesh.example/mcp?key=QUERY-SECRET", MCPToken: "TOKEN-SECRET"}
	for _, v := range []any{round, &round, key, &key, warm, &warm} {
		var outs []string
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
			outs = append(outs, fmt.Sprintf(verb, v))
		}
		outs = append(outs, fmt.Sprint(v), fmt.Sprintf("%v", []any{v}), fmt.Sprintf("%+v", struct{ M any }{v}))
		for _, newHandler := range []func(*bytes.Buffer) slog.Handler{
			func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
			func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
		} {
			var buf bytes.Buffer
			slog.New(newHandler(&buf)).Info("msg", "m", v)
			outs = append(outs, buf.String())
		}
		for _, out := range outs {
			if strings.Contains(out, "SECRET") {
				t.Errorf("%T output leaks a secret: %s", v, out)
			}
		}
	}

	// What is kept.
	if got, want := round.String(), `StartRound{RoundID:"r-1" User:"u1" Thread:"t1" Text:<11 bytes> ClientMessageID:"" Model:"" Effort:"" AutoApprove:false DeveloperInstructions:<12 bytes> MCPURL:"https://mesh.example/mcp" MCPToken:"<redacted>" History:<1 turns, 11 bytes> ReplyTo:"127.0.0.1:4001/mesh/c"}`; got != want {
		t.Errorf("String() =\n%s\nwant\n%s", got, want)
	}
	if got, want := fmt.Sprintf("%#v", key), `messages.SetAPIKey{User:"u1" APIKey:"<redacted>"}`; got != want {
		t.Errorf("%%#v = %s, want %s", got, want)
	}
	if got, want := (SetAPIKey{User: "u1"}).String(), `SetAPIKey{User:"u1" APIKey:""}`; got != want {
		t.Errorf("String() without key = %s, want %s", got, want)
	}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("msg", "round", round)
	for _, want := range []string{`"user":"` + UserTag("u1") + `"`, `"text_bytes":11`, `"mcp_token":"<redacted>"`, `"mcp_url":"https://mesh.example/mcp"`, `"history_turns":1`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("slog JSON %s lacks %s", buf.String(), want)
		}
	}
	if strings.Contains(buf.String(), `"u1"`) {
		t.Errorf("slog JSON %s names the user raw", buf.String())
	}
	// printf 'user:%s' alice | sha256sum | cut -c1-8, as docs/OPERATIONS.md shows.
	if got, want := UserTag("alice"), "u-dabd1db8"; got != want {
		t.Errorf("UserTag(alice) = %q, want %q", got, want)
	}
	if got := (StartRound{MCPURL: "::bad"}).String(); !strings.Contains(got, `MCPURL:"<invalid URL>"`) {
		t.Errorf("String() with bad URL = %s", got)
	}
}
