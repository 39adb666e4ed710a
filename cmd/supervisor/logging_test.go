package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// Text logs to a file or a pipe carry no colour: only a terminal gets
// tint's escape codes. And auto picks JSON there.
func TestLogNoColourOffTerminal(t *testing.T) {
	file, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, c := range []struct {
		name   string
		w      *os.File
		format string
		json   bool
	}{{"file, text", file, "text", false}, {"pipe, text", w, "text", false}, {"file, auto", file, "auto", true}} {
		if _, err := c.w.Seek(0, 0); err == nil {
			_ = c.w.Truncate(0)
		}
		log, _, err := newLogger(c.w, c.format, "debug", "")
		if err != nil {
			t.Fatal(err)
		}
		log.Error("codex app-server died", "user", "u-12345678", "err", "boom", "after", 1500*time.Millisecond)
		log.Debug("debug line")
		var got []byte
		if c.w == w {
			w.Close()
			if got, err = readAll(r); err != nil {
				t.Fatal(err)
			}
		} else if got, err = os.ReadFile(c.w.Name()); err != nil {
			t.Fatal(err)
		}
		if bytes.IndexByte(got, 0x1b) >= 0 {
			t.Errorf("%s: the log holds ESC bytes: %q", c.name, got)
		}
		if !bytes.Contains(got, []byte("codex app-server died")) || !bytes.Contains(got, []byte("debug line")) {
			t.Errorf("%s: the log lacks its lines: %q", c.name, got)
		}
		if isJSON := bytes.HasPrefix(got, []byte("{")); isJSON != c.json {
			t.Errorf("%s: JSON %v, want %v: %q", c.name, isJSON, c.json, got)
		}
	}
}

func readAll(f *os.File) ([]byte, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(f)
	return b.Bytes(), err
}

// Durations read the same in both formats: Go's form, rounded to the
// millisecond, the unit in the value.
func TestLogDurations(t *testing.T) {
	var js, text bytes.Buffer
	jl, _, err := newLogger(&js, "json", "info", "")
	if err != nil {
		t.Fatal(err)
	}
	tl, _, err := newLogger(&text, "text", "info", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []*slog.Logger{jl, tl} {
		l.Info("stopping", "timeout", 30*time.Second, "took", 1503241235*time.Nanosecond, "tiny", 1500*time.Nanosecond)
		l.With("window", time.Minute).Info("sampled")
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(strings.SplitN(js.String(), "\n", 2)[0]), &rec); err != nil {
		t.Fatalf("%v: %s", err, js.String())
	}
	for k, want := range map[string]string{"timeout": "30s", "took": "1.503s", "tiny": "1.5µs"} {
		if rec[k] != want {
			t.Errorf("JSON %s = %#v, want %q", k, rec[k], want)
		}
		if !strings.Contains(text.String(), k+"="+want) {
			t.Errorf("text lacks %s=%s: %s", k, want, text.String())
		}
	}
	if !strings.Contains(js.String(), `"window":"1m0s"`) || !strings.Contains(text.String(), "window=1m0s") {
		t.Errorf("a duration given to With is not in Go's form:\n%s%s", js.String(), text.String())
	}
}

// PIDs and paths under the homes name their user by its tag, in both
// formats and at every level: hollywood's lifecycle lines (debug) log the
// *actor.PID, its max-restarts line the PID's ID as a string; codex's
// stderr and errors quote CODEX_HOME.
func TestLogPIDsNameUsersByTag(t *testing.T) {
	const user = "alice@example.com"
	tag := messages.UserTag(user)
	pid := actor.NewPID("127.0.0.1:4100", "meshweaver/root/user/"+user+"/codex/main")
	for _, format := range []string{"json", "text"} {
		var buf bytes.Buffer
		l, _, err := newLogger(&buf, format, "debug", "/srv/homes")
		if err != nil {
			t.Fatal(err)
		}
		l.Debug("Actor started", "pid", pid)
		l.Error("Actor crashed too many times", "pid", pid.GetID())
		l.Debug("a user's line", "user", tag, "n", 3)
		l.Debug("codex stderr", "line", "WARN failed to read /srv/homes/"+user+"/.codex/config.toml: gone")
		l.Warn("codex app-server died", "err", "exit 1: open /srv/homes/"+user+"/meshweaver/key: denied, /srv/homes/"+user+" (mode 0700); /srv/homes/.supervisor.lock")
		// An error value, as the actors log codex's answers (CI saw a
		// thread/name/set error quote a rollout's path this way).
		l.Debug("naming the thread", "err", fmt.Errorf("thread/name/set: rollout at /srv/homes/%s/.codex/sessions/r.jsonl is empty", user))
		if strings.Contains(buf.String(), user) {
			t.Errorf("%s: the log names the user raw:\n%s", format, buf.String())
		}
		if n := strings.Count(buf.String(), "meshweaver/root/user/"+tag+"/codex/main"); n != 2 {
			t.Errorf("%s: %d PIDs with the user's tag, want 2:\n%s", format, n, buf.String())
		}
		for _, want := range []string{"/srv/homes/" + tag + "/.codex/config.toml", "/srv/homes/" + tag + "/.codex/sessions/r.jsonl", "/srv/homes/" + tag + "/meshweaver/key", "/srv/homes/" + tag + " (mode", "/srv/homes/.supervisor.lock"} {
			if !strings.Contains(buf.String(), want) {
				t.Errorf("%s: the log lacks %s:\n%s", format, want, buf.String())
			}
		}
	}
}
