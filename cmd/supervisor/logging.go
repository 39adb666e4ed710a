package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/lmittmann/tint"
)

// newLogger builds the daemon's logger: tint on a terminal, JSON otherwise,
// unless format says which. The level is a LevelVar, so SIGHUP can change
// it. In JSON, durations are seconds (a float), as Prometheus and log
// pipelines expect, not Go's integer nanoseconds.
func newLogger(w io.Writer, format, level string) (*slog.Logger, *slog.LevelVar, error) {
	lv := &slog.LevelVar{}
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	if format == "auto" {
		format = "json"
		if f, ok := w.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
				format = "text"
			}
		}
	}
	switch format {
	case "text":
		return slog.New(tint.NewTextHandler(w, &tint.Options{Level: lv, TimeFormat: time.TimeOnly})), lv, nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lv, ReplaceAttr: secondsAttr})), lv, nil
	}
	return nil, nil, fmt.Errorf("--log-format %q: want auto, text or json", format)
}

// secondsAttr writes a duration as seconds.
func secondsAttr(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.Float64Value(a.Value.Duration().Seconds())
	}
	return a
}
