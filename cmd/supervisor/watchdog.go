package main

import (
	"context"
	"log/slog"
	"strings"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
)

// sdNotify sends sd_notify states (READY=1, RELOADING=1, STOPPING=1,
// WATCHDOG=1) to systemd's $NOTIFY_SOCKET for Type=notify units, in one
// datagram. No socket, no message; errors are ignored, as sd_notify's
// are. (MAINPID= is not needed: the daemon is the process systemd
// started.)
func sdNotify(states ...string) {
	_, _ = sd.SdNotify(false, strings.Join(states, "\n"))
}

// watchdogInterval is the unit's WatchdogSec= as systemd passes it
// (WATCHDOG_USEC, for this process when WATCHDOG_PID is set); zero when
// the unit asks for no watchdog.
func watchdogInterval(log *slog.Logger) time.Duration {
	d, err := sd.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn("ignoring systemd's watchdog settings", "err", err)
		return 0
	}
	return d
}

// feedWatchdog sends WATCHDOG=1 through notify at once and then every half
// interval, each time only after alive answered within half the interval:
// a daemon whose actor tree does not answer is not fed, and systemd
// restarts it once the interval has passed since the last feed. It
// returns when ctx ends.
func feedWatchdog(ctx context.Context, interval time.Duration, alive func(context.Context) error, notify func(...string), log *slog.Logger) {
	half := interval / 2
	tick := time.NewTicker(half)
	defer tick.Stop()
	fed := true
	for {
		actx, cancel := context.WithTimeout(ctx, half)
		err := alive(actx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err == nil:
			notify(sd.SdNotifyWatchdog)
			if !fed {
				log.Warn("the actor tree answers again; feeding systemd's watchdog")
				fed = true
			}
		case fed:
			log.Error("the actor tree did not answer; systemd's watchdog is not fed and restarts the daemon when it expires",
				"within", half, "watchdog", interval, "err", err)
			fed = false
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}
