package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/client"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/etcdtest"
)

// The cluster chaos run (issue 22 item 6), off by default:
//
//	go test -count=1 -timeout 60m -run TestClusterChaos ./cmd/supervisor/ -v -args -cluster.chaos=25m
//
// Without -race: the etcd members are this test binary, and etcd built
// with the race detector renews leases several times slower (on a loaded
// 2-core machine that alone fenced every member in a warm-up).
var (
	flagClusterChaos = flag.Duration("cluster.chaos", 0, "run the cluster chaos run for this long (0: off): 3 daemons on 3 etcd processes, steady rounds, random SIGKILL and SIGSTOP of daemons and etcd members")
	flagChaosUsers   = flag.Int("cluster.chaos-users", 9, "users of the cluster chaos run, one caller each")
	flagChaosSeed    = flag.Uint64("cluster.chaos-seed", 0, "seed of the cluster chaos run's choices (0: from the clock; logged)")
	flagChaosPause   = flag.Duration("cluster.chaos-pause", 20*time.Second, "mean pause between two faults of the cluster chaos run")
	flagChaosPace    = flag.Duration("cluster.chaos-pace", 250*time.Millisecond, "mean pause between two rounds of one caller of the cluster chaos run (the default keeps a 2-core machine at a load of 4 to 30)")
)

// A fault of the chaos run, on one target, from start to end (the SIGCONT,
// or the restart's "serving").
type chaosFault struct {
	kind       string // "kill", "stop", "etcd-kill", "etcd-stop", "quorum-loss"
	target     int    // member or etcd member index; -1 for quorum loss
	leader     bool   // an etcd fault on the member that led
	start, end time.Time
	owned      []string // a daemon fault: the users the target owned at start
}

func (f *chaosFault) daemon() bool { return f.kind == "kill" || f.kind == "stop" }

// A round of the chaos run, as its caller saw it.
type chaosRound struct {
	id         string // its RoundID
	user       string
	entry      int // the member it was sent through
	sent, done time.Time
	v          messages.RoundFinished
	err        error
	owner      int  // the user's owner just after a completed round (-1 unknown)
	threadOK   bool // completed on the user's codex thread, resumed (the first: any)
}

// TestClusterChaos: three daemons on an etcd cluster of three processes,
// one caller per user sending rounds one after another through a random
// member, and random faults one at a time: SIGKILL of a daemon (restarted
// a few seconds later, as its service manager would), SIGSTOP of a daemon
// (for up to twice the lease TTL), SIGKILL and SIGSTOP of an etcd member,
// now and then two etcd members killed at once (quorum loss, counted on
// its own). It reports, and fails on: double owners (the /proc check),
// survivor fences (a daemon that fenced while quorum held and it was not
// the fault's target), rounds without a verdict whose entry member was
// not hit, rounds with more than one verdict (the client hands on those
// after the first: WithLateReplies), and completed rounds that did not
// resume their user's codex thread. It reports the failover time (a
// daemon fault → the first round of each user it owned that completes on
// another member) p50 and p99.
func TestClusterChaos(t *testing.T) {
	if *flagClusterChaos <= 0 {
		t.Skip("the cluster chaos run runs with -cluster.chaos=DURATION")
	}
	seed := *flagChaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-cluster.chaos-seed)", seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	ec := etcdtest.Start(t, 3)
	tc := newTestClusterOn(t, 3, ec)
	servs := make([][]*opsServe, len(tc.members)) // every life of each member, for its log
	for i, m := range tc.members {
		servs[i] = append(servs[i], m.srv)
	}
	// Verdicts that came after their round's first (or after its caller
	// gave up), by round id: the client hands them on (WithLateReplies).
	var lateMu sync.Mutex
	late := map[string]int{}
	lateOpt := client.WithLateReplies(func(m any) {
		if v, ok := m.(messages.RoundFinished); ok {
			lateMu.Lock()
			late[v.RoundID]++
			lateMu.Unlock()
		}
	})
	clients := []*client.Client{tc.dial(0, lateOpt), tc.dial(1, lateOpt), tc.dial(2, lateOpt)}
	users := make([]string, *flagChaosUsers)
	for i := range users {
		users[i] = fmt.Sprintf("chaos-%02d", i)
	}

	// Each user's first round, one at a time: the app-servers' starts are
	// the heaviest load of the run, and fences they cause on a loaded
	// machine are no fault's.
	for i, u := range users {
		if _, v, _ := roundRetrying(t, clients[i%3], messages.StartRound{User: u, Thread: "t1", Text: "warm up"}, 2*time.Minute); v.Status != messages.StatusCompleted {
			t.Fatalf("%s's first round: %+v", u, v)
		}
	}

	// down[i]: member i is being faulted (callers avoid it; a round sent
	// just before still may meet it).
	var mu sync.Mutex
	down := map[int]bool{}
	var rounds []*chaosRound
	threads := map[string]string{} // user → its codex thread

	load := newLoadSampler()
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for ui, user := range users {
		r := rand.New(rand.NewPCG(seed+uint64(ui)+1, 7))
		wg.Go(func() {
			for k := 0; ; k++ {
				select {
				case <-quit:
					return
				case <-time.After(time.Duration(r.Int64N(2*int64(*flagChaosPace) + 1))): // the caller's pace
				}
				mu.Lock()
				var up []int
				for i := range clients {
					if !down[i] {
						up = append(up, i)
					}
				}
				mu.Unlock()
				if len(up) == 0 {
					continue
				}
				rec := &chaosRound{id: fmt.Sprintf("chaos-%s-%d", user, k), user: user, entry: up[r.IntN(len(up))], sent: time.Now(), owner: -1}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				_, rec.v, rec.err = roundOnce(ctx, clients[rec.entry], messages.StartRound{User: user, Thread: "t1", RoundID: rec.id, Text: fmt.Sprintf("chaos %d", k)})
				cancel()
				rec.done = time.Now()
				if rec.err == nil && rec.v.Status == messages.StatusCompleted {
					if o, err := tc.ownerNow(user); err == nil {
						rec.owner = o
					}
					mu.Lock()
					first, ok := threads[user]
					if !ok {
						threads[user] = rec.v.CodexThreadID
						rec.threadOK = true
					} else {
						rec.threadOK = rec.v.CodexThreadID == first && rec.v.Resumed
					}
					mu.Unlock()
				}
				mu.Lock()
				rounds = append(rounds, rec)
				mu.Unlock()
				if rec.err != nil || rec.v.Retryable {
					time.Sleep(200 * time.Millisecond) // a caller's retry pause
				}
			}
		})
	}
	stopCallers := sync.OnceFunc(func() { close(quit); wg.Wait() })
	t.Cleanup(stopCallers)

	// The faults, one at a time, on this goroutine.
	var faults []*chaosFault
	started := time.Now()
	end := started.Add(*flagClusterChaos)
	ownedBy := func(i int) []string {
		var out []string
		for _, u := range users {
			if o, err := tc.ownerNow(u); err == nil && o == i {
				out = append(out, u)
			}
		}
		return out
	}
	setDown := func(i int, v bool) { mu.Lock(); down[i] = v; mu.Unlock() }
	pause := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-t.Context().Done():
		}
	}
	for time.Now().Before(end) {
		pause(*flagChaosPause/2 + time.Duration(rng.Int64N(int64(*flagChaosPause))))
		load.sample()
		if !time.Now().Before(end) {
			break
		}
		f := &chaosFault{}
		switch x := rng.IntN(20); {
		case x < 7:
			f.kind, f.target = "kill", rng.IntN(len(tc.members))
		case x < 12:
			f.kind, f.target = "stop", rng.IntN(len(tc.members))
		case x < 15:
			f.kind, f.target = "etcd-kill", rng.IntN(3)
		case x < 19:
			f.kind, f.target = "etcd-stop", rng.IntN(3)
		default:
			f.kind, f.target = "quorum-loss", -1
		}
		if f.daemon() {
			f.owned = ownedBy(f.target)
		} else if f.target >= 0 {
			f.leader = ec.Leader() == f.target
		}
		m := (*clusterMember)(nil)
		if f.daemon() {
			m = tc.members[f.target]
			setDown(f.target, true)
		}
		f.start = time.Now()
		switch f.kind {
		case "kill":
			_ = m.srv.cmd.Process.Signal(syscall.SIGKILL)
			m.srv.wait(opsWait)
			// Dead past the lease's expiry, so its users fail over; then
			// restarted, as its service manager would.
			pause(testLeaseTTL + time.Duration(1+rng.IntN(6))*time.Second)
			tc.restart(f.target)
			servs[f.target] = append(servs[f.target], m.srv)
			m.srv.waitMsg("supervisor serving")
		case "stop":
			_ = m.srv.cmd.Process.Signal(syscall.SIGSTOP)
			pause(time.Duration(500+rng.IntN(int(2*testLeaseTTL/time.Millisecond))) * time.Millisecond)
			_ = m.srv.cmd.Process.Signal(syscall.SIGCONT)
		case "etcd-kill":
			ec.Members[f.target].Kill()
			pause(time.Duration(2+rng.IntN(7)) * time.Second)
			ec.Members[f.target].Restart()
		case "etcd-stop":
			ec.Members[f.target].Stop()
			pause(time.Duration(500+rng.IntN(8000)) * time.Millisecond)
			ec.Members[f.target].Cont()
		case "quorum-loss":
			a := rng.IntN(3)
			b := (a + 1 + rng.IntN(2)) % 3
			ec.Members[a].Kill()
			ec.Members[b].Kill()
			pause(time.Duration(3+rng.IntN(5)) * time.Second)
			ec.Restart(a, b)
		}
		f.end = time.Now()
		if f.daemon() {
			setDown(f.target, false)
		}
		faults = append(faults, f)
		t.Logf("%s %s of %d (leader %v) for %v; owned %d users", f.start.Format("15:04:05.000"), f.kind, f.target, f.leader, f.end.Sub(f.start).Round(time.Millisecond), len(f.owned))
	}
	chaosDur := time.Since(started)
	stopCallers()
	load.sample()

	// Every user's thread still works, through every member.
	for i, u := range users {
		if _, v, _ := roundRetrying(t, clients[i%3], messages.StartRound{User: u, Thread: "t1", Text: "after the chaos"}, 2*time.Minute); v.Status != messages.StatusCompleted {
			t.Errorf("%s's round after the chaos: %+v", u, v)
		}
	}

	lateMu.Lock()
	fig := chaosFigures(tc, servs, faults, rounds, late)
	lateMu.Unlock()
	tc.mu.Lock()
	fig.doubleOwners = len(tc.violations)
	tc.mu.Unlock()
	fig.duration, fig.load = chaosDur, load.String()
	report := fig.String()
	t.Logf("failovers:\n%s", strings.Join(fig.failoverWhy, "\n"))
	t.Logf("cluster chaos figures (seed %d):\n%s", seed, report)
	if path := os.Getenv("CLUSTER_CHAOS_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(report), 0o600); err != nil {
			t.Error(err)
		}
	}
	if fig.survivorFences > 0 {
		t.Errorf("%d survivor fences: %s", fig.survivorFences, strings.Join(fig.survivorWhy, "; "))
	}
	if fig.noVerdict > 0 {
		t.Errorf("%d rounds without a verdict whose entry member was not hit: %s", fig.noVerdict, strings.Join(fig.noVerdictWhy[:min(5, len(fig.noVerdictWhy))], "; "))
	}
	if fig.notResumed > 0 {
		t.Errorf("%d completed rounds did not resume their user's codex thread", fig.notResumed)
	}
	if fig.secondVerdicts > 0 {
		t.Errorf("%d rounds had more than one verdict: %s", fig.secondVerdicts, strings.Join(fig.secondWhy[:min(5, len(fig.secondWhy))], "; "))
	}
}

// ownerNow is the member index that owns user in etcd (-1 for none),
// callable off the test goroutine.
func (tc *testCluster) ownerNow(user string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := tc.etcd.Get(ctx, "/meshweaver/c1/owners/"+user)
	if err != nil {
		return -1, err
	}
	if len(resp.Kvs) == 0 {
		return -1, nil
	}
	for i, m := range tc.members {
		if m.id == string(resp.Kvs[0].Value) {
			return i, nil
		}
	}
	return -1, fmt.Errorf("owner %q is not a member", resp.Kvs[0].Value)
}

// chaosFig is what the run reports.
type chaosFig struct {
	duration                         time.Duration
	load                             string
	faults                           map[string]int
	quorumLosses                     int
	rounds, completed, retryable     int
	lostWithEntry                    int // no verdict; the entry member was faulted meanwhile
	noVerdict                        int
	noVerdictWhy                     []string
	secondVerdicts                   int // rounds with a verdict after their first
	secondWhy                        []string
	lateVerdicts                     int // rounds whose only verdict came after their caller gave up
	notResumed                       int
	doubleOwners                     int
	fences                           map[string]int // by cause
	survivorFences                   int
	survivorWhy                      []string
	failovers                        []time.Duration
	failoversBy                      map[string][]time.Duration // by the fault's kind
	failoverWhy                      []string
	takeovers                        []time.Duration // the fault → the send of the round that then completed elsewhere
	stayed                           int             // a victim's user served by the same member after it resumed
	unserved                         int             // a victim's user with no completed round before the next fault
	byStatus                         map[string]int
	maxFailover, p50, p99, meanRound time.Duration
	takeP50, takeP99                 time.Duration
}

// chaosFigures classifies the rounds and the members' fences.
func chaosFigures(tc *testCluster, servs [][]*opsServe, faults []*chaosFault, rounds []*chaosRound, late map[string]int) *chaosFig {
	f := &chaosFig{faults: map[string]int{}, fences: map[string]int{}, byStatus: map[string]int{}, failoversBy: map[string][]time.Duration{}}
	for _, ft := range faults {
		f.faults[ft.kind]++
		if ft.kind == "quorum-loss" {
			f.quorumLosses++
		}
	}
	hit := func(member int, from, to time.Time) bool {
		for _, ft := range faults {
			if ft.daemon() && ft.target == member && ft.start.Before(to) && ft.end.After(from) {
				return true
			}
		}
		return false
	}
	var total time.Duration
	for _, r := range rounds {
		f.rounds++
		switch n := late[r.id]; {
		case n > 1 || n > 0 && r.err == nil:
			f.secondVerdicts++
			f.secondWhy = append(f.secondWhy, fmt.Sprintf("%s via m%d at %s: %d late verdicts, the caller's %v", r.user, r.entry, r.sent.Format("15:04:05.000"), n, r.err))
		case n == 1:
			f.lateVerdicts++
		}
		switch {
		case r.err != nil:
			if hit(r.entry, r.sent, r.done) {
				f.lostWithEntry++
			} else {
				f.noVerdict++
				f.noVerdictWhy = append(f.noVerdictWhy, fmt.Sprintf("%s via m%d at %s: %v", r.user, r.entry, r.sent.Format("15:04:05.000"), r.err))
			}
		default:
			f.byStatus[string(r.v.Status)]++
			if r.v.Retryable {
				f.retryable++
			}
			if r.v.Status == messages.StatusCompleted {
				f.completed++
				total += r.done.Sub(r.sent)
				if !r.threadOK {
					f.notResumed++
				}
			}
		}
	}
	if f.completed > 0 {
		f.meanRound = total / time.Duration(f.completed)
	}
	// Failover: a daemon fault → each user its target owned completes a
	// round on another member.
	for k, ft := range faults {
		if !ft.daemon() {
			continue
		}
		next := time.Now()
		if k+1 < len(faults) {
			next = faults[k+1].start
		}
		for _, u := range ft.owned {
			// The user's first completed round after the fault: before its
			// end (the restart serving, the SIGCONT) it ran elsewhere; after
			// it, the owner tells.
			var first *chaosRound
			for _, r := range rounds {
				if r.user == u && r.err == nil && r.v.Status == messages.StatusCompleted && r.done.After(ft.start) && (first == nil || r.done.Before(first.done)) {
					first = r
				}
			}
			switch {
			case first == nil || first.done.After(next):
				f.unserved++
			case first.done.Before(ft.end) || (first.owner >= 0 && first.owner != ft.target):
				f.failovers = append(f.failovers, first.done.Sub(ft.start))
				f.failoversBy[ft.kind] = append(f.failoversBy[ft.kind], first.done.Sub(ft.start))
				f.takeovers = append(f.takeovers, first.sent.Sub(ft.start))
				var steps []string
				for _, r := range rounds {
					if r.user == u && !r.done.Before(ft.start) && !r.sent.After(first.done) {
						what := string(r.v.Status)
						if r.err != nil {
							what = "error"
						}
						steps = append(steps, fmt.Sprintf("+%v via m%d %v %s", r.sent.Sub(ft.start).Round(100*time.Millisecond), r.entry, r.done.Sub(r.sent).Round(100*time.Millisecond), what))
					}
				}
				f.failoverWhy = append(f.failoverWhy, fmt.Sprintf("%s after the %s of m%d: %v (%s)", u, ft.kind, ft.target, first.done.Sub(ft.start).Round(time.Millisecond), strings.Join(steps, ", ")))
			default:
				f.stayed++ // a short stop: served again by the same member after the SIGCONT
			}
		}
	}
	slices.Sort(f.failovers)
	slices.Sort(f.takeovers)
	if n := len(f.failovers); n > 0 {
		f.p50 = f.failovers[n/2]
		f.p99 = f.failovers[min(n-1, n*99/100)]
		f.maxFailover = f.failovers[n-1]
		f.takeP50, f.takeP99 = f.takeovers[n/2], f.takeovers[min(n-1, n*99/100)]
	}
	// Fences, from the members' logs: explained by a fault on the member
	// itself, by quorum loss, or by an etcd member's resume (etcd may
	// revoke every lease then, etcd-io/etcd#15247); else a survivor fence.
	slack := testLeaseTTL + 2*time.Second
	for i, lives := range servs {
		for _, s := range lives {
			for _, fe := range fenceLines(s.logs.String()) {
				at, msg := fe.at, fe.msg
				cause := ""
				for _, ft := range faults {
					if at.Before(ft.start) || at.After(ft.end.Add(slack)) {
						continue
					}
					switch {
					case ft.daemon() && ft.target == i:
						cause = "its own " + ft.kind
					case ft.kind == "quorum-loss" && cause == "":
						cause = "quorum loss"
					case ft.kind == "etcd-stop" && ft.leader && at.After(ft.end) && cause == "":
						cause = "etcd leader resumed"
					}
				}
				if cause == "" {
					f.survivorFences++
					f.survivorWhy = append(f.survivorWhy, fmt.Sprintf("m%d at %s: %s", i, at.Format("15:04:05.000"), msg))
					cause = "survivor (unexplained)"
				}
				f.fences[cause]++
			}
		}
	}
	return f
}

// fenceLine is one fence in a member's log: the daemon's own (a JSON
// record) or its fence helper's (a text line: it killed the app-servers
// because the daemon's fence time passed).
type fenceLine struct {
	at  time.Time
	msg string
}

func fenceLines(log string) []fenceLine {
	var out []fenceLine
	for _, line := range strings.Split(log, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil {
			msg, _ := rec["msg"].(string)
			if at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(rec["time"])); err == nil && strings.Contains(msg, "stopping every app-server") {
				out = append(out, fenceLine{at, msg})
			}
			continue
		}
		if ts, rest, ok := strings.Cut(line, " supervisor fence "); ok && strings.Contains(rest, "did not renew its lease in time") {
			if at, err := time.Parse(time.RFC3339Nano, ts); err == nil {
				out = append(out, fenceLine{at, "fence helper: " + rest})
			}
		}
	}
	return out
}

func (f *chaosFig) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| figure | value |\n|---|---|\n")
	row := func(k string, v any) { fmt.Fprintf(&b, "| %s | %v |\n", k, v) }
	row("chaos duration", f.duration.Round(time.Second))
	row("faults", fmt.Sprint(f.faults))
	row("quorum-loss episodes", f.quorumLosses)
	row("rounds sent / completed / retryable verdicts", fmt.Sprintf("%d / %d / %d", f.rounds, f.completed, f.retryable))
	row("verdicts by status", fmt.Sprint(f.byStatus))
	row("rounds without a verdict, entry member faulted (lost with it)", f.lostWithEntry)
	row("**rounds without a verdict otherwise**", f.noVerdict)
	row("**rounds with more than one verdict**", f.secondVerdicts)
	row("rounds whose verdict came after their caller gave up", f.lateVerdicts)
	row("**double owners (/proc scans that saw two app-servers for a home)**", f.doubleOwners)
	row("**survivor fences**", f.survivorFences)
	row("fences by cause", fmt.Sprint(f.fences))
	row("failovers measured (daemon fault → the user's round completes elsewhere)", len(f.failovers))
	row("failover p50 / p99 / max", fmt.Sprintf("%v / %v / %v", f.p50.Round(time.Millisecond), f.p99.Round(time.Millisecond), f.maxFailover.Round(time.Millisecond)))
	for _, kind := range slices.Sorted(maps.Keys(f.failoversBy)) {
		d := slices.Sorted(slices.Values(f.failoversBy[kind]))
		n := len(d)
		row(fmt.Sprintf("failover after a %s: n / p50 / p99", kind), fmt.Sprintf("%d / %v / %v", n, d[n/2].Round(time.Millisecond), d[min(n-1, n*99/100)].Round(time.Millisecond)))
	}
	row("the fault → the send of that round (the retry that found the user free) p50 / p99", fmt.Sprintf("%v / %v", f.takeP50.Round(time.Millisecond), f.takeP99.Round(time.Millisecond)))
	row("victims' users served again by the same member after a short SIGSTOP", f.stayed)
	row("victims' users with no completed round before the next fault", f.unserved)
	row("**completed rounds that did not resume the user's thread**", f.notResumed)
	row("mean completed round", f.meanRound.Round(time.Millisecond))
	row("callers / mean pause between a caller's rounds", fmt.Sprintf("%d / %v", *flagChaosUsers, *flagChaosPace))
	row("load average (1 min) samples", f.load)
	return b.String()
}

// loadSampler keeps /proc/loadavg's 1-minute figure over the run.
type loadSampler struct{ samples []string }

func newLoadSampler() *loadSampler { l := &loadSampler{}; l.sample(); return l }

func (l *loadSampler) sample() {
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		l.samples = append(l.samples, strings.Fields(string(b))[0])
	}
}

func (l *loadSampler) String() string {
	if len(l.samples) <= 12 {
		return strings.Join(l.samples, " ")
	}
	return strings.Join(l.samples[:6], " ") + " … " + strings.Join(l.samples[len(l.samples)-6:], " ")
}
