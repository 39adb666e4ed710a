package chaos

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/meshweaver/supervisor/messages"
)

// figures are what a run reports.
type figures struct {
	cfg                       config
	chaosDur, total, stopDur  time.Duration
	rounds, finals            int
	byKind                    map[string]int
	byStatus                  map[string]int
	kindStatus                map[string]map[string]int
	finalsByStatus            map[string]int
	lost, timedOut, dupes     int
	resumed, fresh, fellBack  int            // completed rounds (finals included) by how the codex thread was opened
	causes                    map[string]int // "status: cause" → count
	codexKills                int
	killsByPhase, killsByMode map[string]int
	hitRounds                 int            // rounds in flight at an app-server kill
	hitOutcome                map[string]int // their verdicts
	skipped                   map[string]int
	daemonKills               []*daemonKillRec
	pairs, recovered          int
	ttr, restart, detect      []time.Duration
	loadStart, loadEnd        string
	tempFiles                 int
	logErrors, logWarns       map[string]int
	cooldowns                 int
}

// userTag is the daemon's log name of a user (actors.userTag).
func userTag(user string) string {
	sum := sha256.Sum256([]byte("user:" + user))
	return "u-" + hex.EncodeToString(sum[:4])
}

var digits = regexp.MustCompile(`[0-9]+`)

// causeOf shortens a verdict's error to its kind: without the stderr tail,
// numbers folded.
func causeOf(e string) string {
	e, _, _ = strings.Cut(e, "; stderr tail")
	e = digits.ReplaceAllString(e, "#")
	if len(e) > 140 {
		e = e[:140] + "…"
	}
	return e
}

func (h *harness) figures(chaosDur, total, stopDur time.Duration) *figures {
	h.mu.Lock()
	defer h.mu.Unlock()
	f := &figures{
		cfg: h.cfg, chaosDur: chaosDur, total: total, stopDur: stopDur,
		byKind: map[string]int{}, byStatus: map[string]int{}, kindStatus: map[string]map[string]int{}, finalsByStatus: map[string]int{},
		causes: map[string]int{}, killsByPhase: map[string]int{}, killsByMode: map[string]int{},
		hitOutcome: map[string]int{}, skipped: map[string]int{},
		logErrors: map[string]int{}, logWarns: map[string]int{},
		daemonKills: h.daemonKills, tempFiles: len(h.tempFiles()),
	}
	for _, r := range h.order {
		if len(r.verdicts) > 1 {
			f.dupes++
		}
		status := ""
		switch {
		case len(r.verdicts) > 0:
			status = string(r.verdicts[0].Status)
			if r.verdicts[0].Status != messages.StatusCompleted {
				f.causes[status+": "+causeOf(r.verdicts[0].Error)]++
			}
		case r.lost:
			status = "lost to daemon kill"
		default:
			status = "no verdict (timed out)"
		}
		if len(r.verdicts) > 0 && r.verdicts[0].Status == messages.StatusCompleted {
			switch v := r.verdicts[0]; {
			case v.FellBack:
				f.fellBack++
			case v.Resumed:
				f.resumed++
			default:
				f.fresh++
			}
		}
		if r.final {
			f.finals++
			f.finalsByStatus[status]++
			continue
		}
		f.rounds++
		f.byKind[r.kind]++
		f.byStatus[status]++
		if f.kindStatus[r.kind] == nil {
			f.kindStatus[r.kind] = map[string]int{}
		}
		f.kindStatus[r.kind][status]++
		if r.lost {
			f.lost++
		}
		if r.timedOut {
			f.timedOut++
		}
	}
	f.codexKills = len(h.kills)
	hit := map[string]bool{}
	for _, k := range h.kills {
		f.killsByPhase[k.phase]++
		f.killsByMode[k.mode]++
		for _, id := range k.inFlight {
			hit[id] = true
		}
	}
	f.hitRounds = len(hit)
	for _, k := range h.kills {
		for _, id := range k.inFlight {
			r := h.rounds[id]
			if len(r.verdicts) > 0 && r.verdicts[0].Status != messages.StatusCompleted && r.verdictAt.After(k.at) {
				f.detect = append(f.detect, r.verdictAt.Sub(k.at))
			}
		}
	}
	for id := range hit {
		r := h.rounds[id]
		switch {
		case len(r.verdicts) > 0:
			f.hitOutcome[string(r.verdicts[0].Status)]++
		case r.lost:
			f.hitOutcome["lost to daemon kill"]++
		default:
			f.hitOutcome["none"]++
		}
	}
	for _, s := range h.skipped {
		f.skipped[s]++
	}

	// Recovery: for every kill and every mesh thread it touched (the
	// user's threads; every thread for a daemon kill), the first round sent
	// after the kill that completed.
	type kill struct {
		at    time.Time
		users []string
	}
	var all []kill
	for _, k := range h.kills {
		all = append(all, kill{k.at, []string{k.user}})
	}
	for _, k := range h.daemonKills {
		all = append(all, kill{k.at, h.users()})
	}
	for _, k := range all {
		for _, u := range k.users {
			for _, th := range h.threads(u) {
				f.pairs++
				for _, r := range h.order {
					if r.thread == th && !r.sentAt.Before(k.at) && len(r.verdicts) > 0 &&
						r.verdicts[0].Status == messages.StatusCompleted {
						f.recovered++
						f.ttr = append(f.ttr, r.verdictAt.Sub(k.at))
						break
					}
				}
			}
		}
	}
	// Restart latency: from an app-server kill to the user's next ready
	// app-server (the daemon's log).
	for _, k := range h.kills {
		tag := userTag(k.user)
		var best time.Time
		for _, d := range h.epochs {
			d.log.mu.Lock()
			for _, rl := range d.log.ready {
				if rl.user == tag && rl.at.After(k.at) && (best.IsZero() || rl.at.Before(best)) {
					best = rl.at
				}
			}
			d.log.mu.Unlock()
		}
		if !best.IsZero() {
			f.restart = append(f.restart, best.Sub(k.at))
		}
	}
	for _, d := range h.epochs {
		d.log.mu.Lock()
		for m, n := range d.log.errors {
			f.logErrors[m] += n
		}
		for m, n := range d.log.warns {
			f.logWarns[m] += n
		}
		f.cooldowns += d.log.cooldowns
		d.log.mu.Unlock()
	}
	return f
}

// loadAvg is the 1-minute load average: the machine may be shared.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

func stats(ds []time.Duration) string {
	if len(ds) == 0 {
		return "n/a"
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	pct := func(p int) time.Duration { return s[min(len(s)-1, len(s)*p/100)] }
	r := func(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }
	return fmt.Sprintf("median %s, p90 %s, max %s (n=%d)", r(pct(50)), r(pct(90)), r(s[len(s)-1]), len(s))
}

func sortedKeys(m map[string]int) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		if m[ks[i]] != m[ks[j]] {
			return m[ks[i]] > m[ks[j]]
		}
		return ks[i] < ks[j]
	})
	return ks
}

func counts(m map[string]int) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// text is the report for t.Log.
func (f *figures) text() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("=== chaos figures (seed %d) ===", f.cfg.seed)
	w("run: %s of chaos, %s with the final rounds; SIGTERM stop took %s", f.chaosDur.Round(time.Millisecond), f.total.Round(time.Millisecond), f.stopDur.Round(time.Millisecond))
	w("rounds sent: %d (%s) + %d final rounds", f.rounds, counts(f.byKind), f.finals)
	w("verdicts: %s", counts(f.byStatus))
	for _, k := range []string{kindText, kindApprove, kindDecline} {
		w("  %s rounds: %s", k, counts(f.kindStatus[k]))
	}
	w("final rounds: %s", counts(f.finalsByStatus))
	w("completed rounds by codex thread: resumed %d, fresh %d, fell back to a transcript %d", f.resumed, f.fresh, f.fellBack)
	w("duplicate verdicts: %d; rounds without a verdict from a live daemon: %d", f.dupes, f.timedOut)
	w("app-server kills: %d; by phase: %s", f.codexKills, counts(f.killsByPhase))
	w("  by mode: %s", counts(f.killsByMode))
	w("  rounds in flight at a kill: %d; their verdicts: %s", f.hitRounds, counts(f.hitOutcome))
	if len(f.skipped) > 0 {
		w("  kills not made: %s", counts(f.skipped))
	}
	for i, k := range f.daemonKills {
		w("daemon kill %d: %d rounds in flight; %d app-servers, %d gone by Pdeathsig within %s; %d other processes (%d still alive before the restart); %d pid records left, %d stale after the restart; next daemon reaped %d; serving again after %s; survivors %d",
			i+1, len(k.inFlight), k.appServers, k.pdeathsig, k.pdeathAfter.Round(time.Millisecond), k.others, k.othersLeft,
			k.records, k.recordsLeft, k.reapedLog, k.restart.Round(time.Millisecond), len(k.survivors))
	}
	w("recoveries: %d of %d (kill, mesh thread) pairs had a later round complete", f.recovered, f.pairs)
	w("time to recover (kill → next completed round on the thread): %s", stats(f.ttr))
	w("app-server restart (kill → the user's next ready app-server): %s", stats(f.restart))
	w("failure verdict (kill → verdict of a round it hit): %s", stats(f.detect))
	w("load average at start / end: %s / %s", f.loadStart, f.loadEnd)
	w("causes of failed/unavailable verdicts:")
	for _, c := range sortedKeys(f.causes) {
		w("  %4d  %s", f.causes[c], c)
	}
	w("daemon log: cool-downs %d; ERROR lines: %s", f.cooldowns, counts(f.logErrors))
	w("daemon log WARN lines: %s", counts(f.logWarns))
	w("temporary files left by interrupted writes: %d", f.tempFiles)
	return b.String()
}

// markdown is the same for docs/RELIABILITY.md.
func (f *figures) markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("| figure | value |")
	w("|---|---|")
	w("| seed | %d |", f.cfg.seed)
	w("| users × threads | %d × %d |", f.cfg.users, f.cfg.threads)
	w("| duration | %s of chaos, %s with the final rounds |", f.chaosDur.Round(time.Second), f.total.Round(time.Second))
	w("| rounds sent | %d (%s) + %d final |", f.rounds, counts(f.byKind), f.finals)
	w("| verdicts | %s |", counts(f.byStatus))
	for _, k := range []string{kindText, kindApprove, kindDecline} {
		w("| … of %s rounds | %s |", k, counts(f.kindStatus[k]))
	}
	w("| final rounds | %s |", counts(f.finalsByStatus))
	w("| completed rounds by codex thread | resumed %d, fresh %d, fell back to a transcript %d |", f.resumed, f.fresh, f.fellBack)
	w("| duplicate verdicts | %d |", f.dupes)
	w("| app-server kills | %d: %s |", f.codexKills, counts(f.killsByPhase))
	w("| rounds in flight at an app-server kill | %d: %s |", f.hitRounds, counts(f.hitOutcome))
	for i, k := range f.daemonKills {
		w("| daemon kill %d | %d rounds in flight (lost); %d app-servers, %d ended by Pdeathsig within %s; %d pid records left, the next daemon reaped %d; serving again after %s; %d survivors |",
			i+1, len(k.inFlight), k.appServers, k.pdeathsig, k.pdeathAfter.Round(time.Millisecond), k.records, k.reapedLog,
			k.restart.Round(time.Millisecond), len(k.survivors))
	}
	w("| recoveries | %d of %d (kill, mesh thread) pairs |", f.recovered, f.pairs)
	w("| time to recover | %s |", stats(f.ttr))
	w("| app-server restart | %s |", stats(f.restart))
	w("| failure verdict after a kill | %s |", stats(f.detect))
	w("| load average (1 min) at start / end | %s / %s |", f.loadStart, f.loadEnd)
	w("| cool-downs | %d |", f.cooldowns)
	w("")
	w("Causes of failed and unavailable verdicts:")
	w("")
	for _, c := range sortedKeys(f.causes) {
		w("- %d × `%s`", f.causes[c], c)
	}
	return b.String()
}
