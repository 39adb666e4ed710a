package actors

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshweaver/supervisor/codexrpc"
)

// Metrics are the daemon's Prometheus collectors. Labels never carry user
// ids, thread keys or anything secret: only fixed vocabularies.
type Metrics struct {
	Rounds         *prometheus.CounterVec // by verdict status
	FirstDelta     prometheus.Histogram   // seconds from a round's start to its first text delta
	RoundDuration  prometheus.Histogram   // seconds from a round's start to its verdict
	LiveAppServers prometheus.Gauge
	Starts         prometheus.Counter     // app-server processes started
	Deaths         prometheus.Counter     // unexpected app-server exits
	Restarts       prometheus.Counter     // starts that follow a death
	Evictions      *prometheus.CounterVec // by reason: idle, cap
	Logins         *prometheus.CounterVec // device-code logins by outcome: success, failure
	RemoteRejected *prometheus.CounterVec // messages refused by reason: unknown, malformed, invalid
	Users          prometheus.Gauge       // user actors alive
	UserReaps      prometheus.Counter     // idle user actors stopped by the root
	RoundsInFlight prometheus.Gauge       // rounds running: started, no verdict yet
	Hung           prometheus.Counter     // app-servers killed because they stopped answering (also in Deaths)
	ThreadResumes  prometheus.Counter     // thread/resume calls that loaded a thread
	WarmThreads    prometheus.Counter     // rounds that found their thread loaded with their settings (no resume)
	Draining       prometheus.Gauge       // 1 once the node admits no new rounds (it is stopping)
	LimitHits      *prometheus.CounterVec // a user's limit met, by resource: memory, pids, disk
	UnaskedTurns   *prometheus.CounterVec // turns an app-server started that no round asked for, by action: interrupted, allowed
	Tokens         *prometheus.CounterVec // tokens charged to the users' ledgers, by kind: input, cached_input, output, reasoning
	BudgetRefusals prometheus.Counter     // rounds refused because their user's token budget was spent
	BadLines       *prometheus.CounterVec // app-server lines skipped, by codexrpc.BadLine
}

// NewMetrics makes the collectors and registers them with reg (nil: not
// registered, for tests and tools).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	buckets := []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	m := &Metrics{
		Rounds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "supervisor_rounds_total", Help: "Rounds finished, by verdict status.",
		}, []string{"status"}),
		FirstDelta: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "supervisor_round_first_delta_seconds", Help: "Time from a round's start to its first streamed text.", Buckets: buckets,
		}),
		RoundDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "supervisor_round_duration_seconds", Help: "Time from a round's start to its verdict.", Buckets: buckets,
		}),
		LiveAppServers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "supervisor_live_app_servers", Help: "codex app-server processes running.",
		}),
		Starts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "supervisor_app_server_starts_total", Help: "codex app-server processes started.",
		}),
		Deaths: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "supervisor_app_server_deaths_total", Help: "codex app-server processes that exited unexpectedly.",
		}),
		Restarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "supervisor_app_server_restarts_total", Help: "codex app-server starts that follow an unexpected exit.",
		}),
		Evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "supervisor_app_server_evictions_total", Help: "Idle codex app-servers stopped, by reason.",
		}, []string{"reason"}),
		Logins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "supervisor_logins_total", Help: "Device-code logins finished, by outcome.",
		}, []string{"outcome"}),
		RemoteRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "supervisor_remote_rejected_total", Help: "Remote messages refused, by reason.",
		}, []string{"reason"}),
		Users: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "supervisor_users", Help: "Users active on this node: user actors alive.",
		}),
		UserReaps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "supervisor_user_reaps_total", Help: "Idle user actors stopped (no app-server, no round, no message for UserIdle).",
		}),
		RoundsInFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "supervisor_rounds_in_flight", Help: "Rounds running now: started and not yet given their verdict (queued ones excluded).",
		}),
		Hung: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "supervisor_app_server_hung_total", Help: "codex app-server processes killed because they stopped answering a health call (also counted in deaths).",
		}),
		ThreadResumes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "supervisor_thread_resumes_total", Help: "codex threads loaded by thread/resume (a round's or a warm-up's).",
		}),
		WarmThreads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "supervisor_thread_warm_opens_total", Help: "Rounds whose codex thread was loaded already with the same settings (no unload, no resume).",
		}),
		LimitHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "supervisor_user_limit_hits_total", Help: "Times a user's limit was met (an OOM kill, a refused fork, a full home), by resource.",
		}, []string{"resource"}),
		UnaskedTurns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "supervisor_unasked_turns_total", Help: "Turns an app-server started that no round or thread command asked for (a codex goal continuing), by what the daemon did: interrupted or allowed.",
		}, []string{"action"}),
		Tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "supervisor_tokens_total", Help: "Model tokens charged to the users' ledgers, by kind (input includes cached_input, output includes reasoning).",
		}, []string{"kind"}),
		BudgetRefusals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "supervisor_budget_refusals_total", Help: "Rounds refused before any model request because their user's token budget was spent.",
		}),
		BadLines: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "supervisor_app_server_bad_lines_total", Help: "Lines of the app-servers skipped (not JSON-RPC, over the line cap, answers to ids never sent, requests past the cap), by kind.",
		}, []string{"kind"}),
		Draining: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "supervisor_draining", Help: "1 once this node admits no new rounds: it is stopping and lets the running ones finish.",
		}),
	}
	// Every label set exists from the start at zero, so that rate() and
	// alerts see a series before its first event.
	for _, s := range []string{"completed", "failed", "interrupted", "busy", "unavailable", "rejected"} {
		m.Rounds.WithLabelValues(s)
	}
	for _, r := range []string{"idle", "cap"} {
		m.Evictions.WithLabelValues(r)
	}
	for _, o := range []string{"success", "failure"} {
		m.Logins.WithLabelValues(o)
	}
	for _, r := range []string{"unknown", "malformed", "invalid", "user-cap"} { // the root's; the edge's are preset by serve
		m.RemoteRejected.WithLabelValues(r)
	}
	for _, r := range []string{"memory", "pids", "disk"} {
		m.LimitHits.WithLabelValues(r)
	}
	for _, a := range []string{"interrupted", "allowed"} {
		m.UnaskedTurns.WithLabelValues(a)
	}
	for _, k := range []string{"input", "cached_input", "output", "reasoning"} {
		m.Tokens.WithLabelValues(k)
	}
	for _, k := range codexrpc.AllBadLines {
		m.BadLines.WithLabelValues(k.String())
	}
	if reg != nil {
		reg.MustRegister(m.BadLines)
		reg.MustRegister(m.Hung, m.ThreadResumes, m.WarmThreads, m.Draining, m.LimitHits, m.UserReaps, m.UnaskedTurns, m.Tokens, m.BudgetRefusals)
		reg.MustRegister(m.Rounds, m.FirstDelta, m.RoundDuration, m.LiveAppServers, m.Starts,
			m.Deaths, m.Restarts, m.Evictions, m.Logins, m.RemoteRejected, m.Users, m.RoundsInFlight)
	}
	return m
}
