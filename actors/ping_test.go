package actors

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// Ping, in a bubble: a running root answers at once (no time passes); a
// root that was stopped never answers, so Ping ends with its context's
// deadline, exactly at it. The daemon's systemd watchdog is fed on this.
func TestPingAnswersWhileTheRootRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, err := actor.NewEngine(actor.NewEngineConfig())
		if err != nil {
			t.Fatal(err)
		}
		root, err := SpawnRoot(e, Config{Homes: t.TempDir(), Workspace: t.TempDir()},
			Deps{Logger: slog.New(slog.DiscardHandler), Metrics: NewMetrics(nil)})
		if err != nil {
			t.Fatal(err)
		}
		ping := func() (time.Duration, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			start := time.Now()
			err := Ping(ctx, e, root)
			return time.Since(start), err
		}
		for i := range 3 {
			if took, err := ping(); err != nil || took != 0 {
				t.Errorf("ping %d of a running root: %v after %v, want an answer at once", i, err, took)
			}
		}
		<-e.Poison(root).Done()
		took, err := ping()
		if !errors.Is(err, context.DeadlineExceeded) || took != 3*time.Second {
			t.Errorf("ping of a stopped root: %v after %v, want DeadlineExceeded after 3s", err, took)
		}
	})
}
