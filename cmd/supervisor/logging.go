package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lmittmann/tint"
	"golang.org/x/sys/unix"

	"github.com/meshweaver/supervisor/actors"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// newLogger builds the daemon's logger: tint on a terminal, JSON otherwise,
// unless format says which; colour only on a terminal, whatever the
// format. The level is a LevelVar, so SIGHUP can change it. Both formats
// pass every attribute through logAttr: durations in Go's form, users in
// PIDs and in paths under homes (when not empty) by their tag.
func newLogger(w io.Writer, format, level, homes string) (*slog.Logger, *slog.LevelVar, error) {
	lv := &slog.LevelVar{}
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	tty := isTerminal(w)
	replace := func(_ []string, a slog.Attr) slog.Attr { return logAttr(homes, a) }
	if format == "auto" {
		format = "json"
		if tty {
			format = "text"
		}
	}
	switch format {
	case "text":
		return slog.New(tint.NewTextHandler(w, &tint.Options{Level: lv, TimeFormat: time.TimeOnly, NoColor: !tty, ReplaceAttr: replace})), lv, nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lv, ReplaceAttr: replace})), lv, nil
	}
	return nil, nil, fmt.Errorf("--log-format %q: want auto, text or json", format)
}

// isTerminal reports whether w is a terminal: a file whose descriptor
// answers the terminal ioctl (what golang.org/x/term asks). A character
// device is not enough: /dev/null is one.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// logAttr is the ReplaceAttr of both log formats.
//
// A duration is written in Go's form ("30s", "1.503s", "250ms"), rounded
// to the millisecond from a millisecond up: the unit is in the value, it
// reads the same in text and JSON, and it is the syntax of the duration
// flags and of `supervisor config`, so a setting and the log line about it
// compare as they are. (Pipelines parse it: Go's time.ParseDuration, Loki's
// duration(), Vector's parse_duration.)
//
// A PID (hollywood's lifecycle lines, a panic's actor, a sender), or a
// string quoting one, names its user by the user's tag, as every other
// line does (actors.HashUserInPID); so does a path under homes (codex
// prints its CODEX_HOME in some errors and warnings): homes/<user>/… reads
// homes/u-xxxxxxxx/….
func logAttr(homes string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindDuration:
		a.Value = slog.StringValue(formatDuration(a.Value.Duration()))
	case slog.KindString:
		a.Value = slog.StringValue(hashHomes(homes, actors.HashUserInPID(a.Value.String())))
	case slog.KindAny:
		switch v := a.Value.Any().(type) {
		case *actor.PID:
			if v != nil {
				a.Value = slog.StringValue(actors.HashUserInPID(v.String()))
			}
		case error:
			// An error is its text in either format; the text may quote
			// a home (codex's errors name rollouts under CODEX_HOME).
			if v != nil {
				a.Value = slog.StringValue(hashHomes(homes, actors.HashUserInPID(v.Error())))
			}
		}
	}
	return a
}

// formatDuration is d in Go's form, rounded to the millisecond unless it
// is shorter than one.
func formatDuration(d time.Duration) string {
	if d >= time.Millisecond || d <= -time.Millisecond {
		d = d.Round(time.Millisecond)
	}
	return d.String()
}

// hashHomes replaces the user folder of every path under homes in s with
// the user's tag. A user id may hold "/": it runs to its folder's own
// entries (/.codex, /meshweaver) when the path names one, else to the end
// of the path (a space, a quote, a colon, a comma, the end of s). Entries
// of homes that start with "." (the lock, the images) are not users.
func hashHomes(homes, s string) string {
	if homes == "" {
		return s
	}
	prefix := strings.TrimSuffix(filepath.Clean(homes), "/") + "/"
	var b strings.Builder
	for {
		i := strings.Index(s, prefix)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i+len(prefix)])
		rest := s[i+len(prefix):]
		end := strings.IndexAny(rest, " \t\n\"'`:,;()")
		if end < 0 {
			end = len(rest)
		}
		for _, entry := range []string{"/.codex", "/meshweaver"} {
			if j := strings.Index(rest, entry); j > 0 && (j < end || end == len(rest)) {
				end = j
				break
			}
		}
		if end > 0 && !strings.HasPrefix(rest, ".") {
			b.WriteString(messages.UserTag(rest[:end]))
			rest = rest[end:]
		}
		s = rest
	}
}
