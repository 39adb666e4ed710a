package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/template"

	"github.com/meshweaver/supervisor/actors"
	"github.com/meshweaver/supervisor/isolate"
)

// daemonMetricNames is every metric name the daemon's /metrics can serve:
// the registry built as serve builds it (the Go and process collectors,
// build info, actors.NewMetrics with the preset reasons, the listener
// guard), with a histogram's _bucket, _sum and _count, plus the collectors
// serve registers inline only in a cluster, with the gateway or once the
// edge is up (the Name literals of cluster.go, gatewayserve.go and
// serve.go).
func daemonMetricNames(t testing.TB) map[string]bool {
	t.Helper()
	reg := newRegistry()
	reg.MustRegister(readBuildInfo().gauge())
	presetRejectReasons(actors.NewMetrics(reg))
	newListenerGuard(isolate.Range{}, reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[f.GetName()+s] = true
			}
		}
	}
	inline := 0
	for _, file := range []string{"cluster.go", "gatewayserve.go", "serve.go"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`Name:\s+"(supervisor_[a-z_]+)"`).FindAllSubmatch(b, -1) {
			names[string(m[1])] = true
			inline++
		}
	}
	for _, want := range []string{"supervisor_rounds_total", "supervisor_round_first_delta_seconds_bucket", "supervisor_cluster_fences_total", "go_goroutines"} {
		if !names[want] {
			t.Fatalf("the daemon's metrics lack %s: the name collection is broken (%d names, %d inline)", want, len(names), inline)
		}
	}
	return names
}

// exprMetrics is every metric name a PromQL expression selects.
func exprMetrics(t testing.TB, expr parser.Expr) []string {
	t.Helper()
	var out []string
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == model.MetricNameLabel {
					name = m.Value
				}
			}
			out = append(out, name)
		}
		return nil
	})
	return out
}

// ruleCase is one alert's promtool-style unit test: series loaded as
// promqltest's "load 1m" block, and whether the alert fires at 35m. A
// firing alert's samples carry instance="a" (promtool's exp_labels: the
// labels the alert keeps), and reason too where the rule groups by it.
type ruleCase struct {
	series string
	fires  bool
}

// alertLabels are the labels each alert's samples keep (besides the rule's
// own): what its summary may name.
var alertLabels = map[string][]string{
	"SupervisorRemoteRejected": {"instance", "reason"},
}

// ruleCases: for each alert of deploy/prometheus/rules.yml, series that
// must fire it and series that must not.
var ruleCases = map[string][]ruleCase{
	"SupervisorAppServersDying": {
		{`supervisor_app_server_deaths_total{instance="a"} 0+1x40`, true},
		{`supervisor_app_server_deaths_total{instance="a"} 0x10 1x30`, false}, // one death, 25m ago
	},
	"SupervisorRoundsFailing": {
		{`supervisor_rounds_total{instance="a",status="failed"} 0+2x40
		  supervisor_rounds_total{instance="a",status="completed"} 0+8x40`, true}, // 20%
		{`supervisor_rounds_total{instance="a",status="failed"} 0+1x40
		  supervisor_rounds_total{instance="a",status="completed"} 0+19x40`, false}, // 5%
	},
	"SupervisorFirstDeltaSlow": {
		{`supervisor_round_first_delta_seconds_bucket{instance="a",le="10"} 0x40
		  supervisor_round_first_delta_seconds_bucket{instance="a",le="30"} 0x40
		  supervisor_round_first_delta_seconds_bucket{instance="a",le="60"} 0+1x40
		  supervisor_round_first_delta_seconds_bucket{instance="a",le="+Inf"} 0+1x40`, true},
		{`supervisor_round_first_delta_seconds_bucket{instance="a",le="10"} 0+1x40
		  supervisor_round_first_delta_seconds_bucket{instance="a",le="30"} 0+1x40
		  supervisor_round_first_delta_seconds_bucket{instance="a",le="60"} 0+1x40
		  supervisor_round_first_delta_seconds_bucket{instance="a",le="+Inf"} 0+1x40`, false},
	},
	"SupervisorNearMaxLive": {
		{`supervisor_live_app_servers{instance="a"} 60x40`, true},
		{`supervisor_live_app_servers{instance="a"} 40x30 60x10`, false}, // high for 10m only
	},
	"SupervisorEvictingForCap": {
		{`supervisor_app_server_evictions_total{instance="a",reason="cap"} 0x30 1x10`, true},
		{`supervisor_app_server_evictions_total{instance="a",reason="cap"} 0x40
		  supervisor_app_server_evictions_total{instance="a",reason="idle"} 0+1x40`, false},
	},
	"SupervisorRemoteRejected": {
		{`supervisor_remote_rejected_total{instance="a",reason="unauthorized"} 0+1x40`, true},
		{`supervisor_remote_rejected_total{instance="a",reason="unauthorized"} 0x40`, false},
	},
	"SupervisorClusterFenced": {
		{`supervisor_cluster_fences_total{instance="a"} 0x30 1x10`, true},
		{`supervisor_cluster_fences_total{instance="a"} 1x40`, false}, // a fence before the window
	},
	"SupervisorFenceHelperRestarting": {
		{`supervisor_cluster_fence_helper_restarts_total{instance="a"} 0x30 1x10`, true},
		{`supervisor_cluster_fence_helper_restarts_total{instance="a"} 0x40`, false},
	},
}

// TestRules parses deploy/prometheus/rules.yml with Prometheus's own rule
// parser (strict: unknown fields refused; every expression and template
// checked), and then, for each alert: it names only metrics the daemon
// serves, it carries a severity and a runbook_url whose anchor is a heading
// of docs/OPERATIONS.md, and it fires on the series of ruleCases that must
// fire it and not on the others (evaluated as Prometheus does, for its
// whole `for` at the rule's interval: promtool test rules' semantics on
// promqltest's storage and engine).
func TestRules(t *testing.T) {
	p := parser.NewParser(parser.Options{})
	groups, errs := rulefmt.ParseFile("../../deploy/prometheus/rules.yml", false, model.UTF8Validation, p, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if len(errs) > 0 {
		t.Fatalf("rulefmt: %v", errs)
	}
	names := daemonMetricNames(t)
	anchors := docAnchors(t, "../../docs/OPERATIONS.md")
	seen := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a recording rule %s: only alerts here", g.Name, r.Record)
				continue
			}
			seen[r.Alert] = true
			expr, err := p.ParseExpr(r.Expr)
			if err != nil {
				t.Fatalf("%s: %v", r.Alert, err)
			}
			for _, m := range exprMetrics(t, expr) {
				if !names[m] {
					t.Errorf("%s names %s, which the daemon does not serve", r.Alert, m)
				}
			}
			if r.Labels["severity"] == "" {
				t.Errorf("%s has no severity", r.Alert)
			}
			const base = "https://github.com/meshweaver/supervisor/blob/main/docs/OPERATIONS.md#"
			if a, ok := strings.CutPrefix(r.Annotations["runbook_url"], base); !ok || !anchors[a] {
				t.Errorf("%s: runbook_url %q is no heading of docs/OPERATIONS.md", r.Alert, r.Annotations["runbook_url"])
			}
			cases := ruleCases[r.Alert]
			if !slices.ContainsFunc(cases, func(c ruleCase) bool { return c.fires }) || !slices.ContainsFunc(cases, func(c ruleCase) bool { return !c.fires }) {
				t.Errorf("%s: no case that fires it and one that does not", r.Alert)
			}
			interval := time.Duration(g.Interval)
			if interval == 0 {
				interval = time.Minute
			}
			for i, c := range cases {
				got, vec := fires(t, expr, c.series, 35*time.Minute, time.Duration(r.For), interval)
				if got != c.fires {
					t.Errorf("%s case %d: fires %v at 35m, want %v; series:\n%s", r.Alert, i, got, c.fires, c.series)
				}
				if got {
					checkAlert(t, r, vec, 35*time.Minute)
				}
			}
		}
	}
	for name := range ruleCases {
		if !seen[name] {
			t.Errorf("ruleCases tests %s, which the rules file has no more", name)
		}
	}
}

// checkAlert: each sample of a firing alert keeps exactly the labels
// alertLabels names (instance alone by default), and every annotation
// expands as Prometheus's rule manager expands it (template.Expander, with
// $labels and $value), without an error and without a missing label.
func checkAlert(t *testing.T, r rulefmt.Rule, vec promql.Vector, at time.Duration) {
	t.Helper()
	want := alertLabels[r.Alert]
	if want == nil {
		want = []string{"instance"}
	}
	for _, smpl := range vec {
		l := smpl.Metric.Map()
		kept := maps.Clone(l)
		delete(kept, model.MetricNameLabel) // the rule manager drops it from an alert
		if got := slices.Sorted(maps.Keys(kept)); !slices.Equal(got, want) {
			t.Errorf("%s fires with labels %v, want %v", r.Alert, got, want)
		}
		defs := "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}"
		for k, text := range r.Annotations {
			e := template.NewTemplateExpander(context.Background(), defs+text, "__alert_"+r.Alert,
				template.AlertTemplateData(l, nil, "", smpl), model.TimeFromUnixNano(int64(at)), nil, nil, nil)
			out, err := e.Expand()
			if err != nil || strings.Contains(out, "<no value>") || strings.Contains(out, "{{") {
				t.Errorf("%s annotation %s expands to %q (%v)", r.Alert, k, out, err)
			}
			for _, m := range regexp.MustCompile(`\$labels\.(\w+)`).FindAllStringSubmatch(text, -1) {
				if _, ok := kept[m[1]]; !ok { // missingkey=zero would print nothing
					t.Errorf("%s annotation %s names $labels.%s, which the alert does not keep", r.Alert, k, m[1])
				}
			}
		}
	}
}

// fires says whether an alert of expr with the given `for` fires at at:
// its expression returned a sample at every evaluation from at-for to at.
// It returns the samples of the last evaluation.
func fires(t *testing.T, expr parser.Expr, series string, at, forDur, interval time.Duration) (bool, promql.Vector) {
	t.Helper()
	st := promqltest.LoadedStorage(t, "load 1m\n"+series)
	t.Cleanup(func() { st.Close() })
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	for ts := at - forDur; ts <= at; ts += interval {
		q, err := engine.NewInstantQuery(context.Background(), st, nil, expr.String(), time.Unix(0, 0).Add(ts))
		if err != nil {
			t.Fatal(err)
		}
		res := q.Exec(context.Background())
		if res.Err != nil {
			t.Fatalf("%s at %v: %v", expr, ts, res.Err)
		}
		v, err := res.Vector()
		q.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(v) == 0 {
			return false, nil
		}
		if ts+interval > at {
			return true, v
		}
	}
	return true, nil
}

// docAnchors is the GitHub anchor of every heading of a Markdown file.
func docAnchors(t testing.TB, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(b), -1) {
		a := strings.ToLower(strings.TrimSpace(m[1]))
		a = regexp.MustCompile(`[^a-z0-9 _-]`).ReplaceAllString(a, "")
		out[strings.ReplaceAll(a, " ", "-")] = true
	}
	return out
}

// TestDashboard parses deploy/grafana/supervisor.json and every query of
// its panels with the PromQL parser (Grafana's $__rate_interval and the
// dashboard's own variables substituted), and checks that every metric a
// query names is one the daemon serves, that every datasource is the
// dashboard's Prometheus variable, and that the panels cover what an
// operator watches: rounds, latency, app-servers, limits, cluster
// ownership and fences, tokens and budget refusals.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile("../../deploy/grafana/supervisor.json")
	if err != nil {
		t.Fatal(err)
	}
	type target struct {
		RefID      string `json:"refId"`
		Expr       string `json:"expr"`
		Datasource struct {
			Type string `json:"type"`
			UID  string `json:"uid"`
		} `json:"datasource"`
	}
	var d struct {
		UID        string `json:"uid"`
		Title      string `json:"title"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID      int      `json:"id"`
			Type    string   `json:"type"`
			Title   string   `json:"title"`
			Targets []target `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("the dashboard has no uid or title")
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	subst := strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*")
	p := parser.NewParser(parser.Options{})
	names := daemonMetricNames(t)
	used := map[string]bool{}
	ids := map[int]bool{}
	queries := 0
	for _, panel := range d.Panels {
		if ids[panel.ID] {
			t.Errorf("panel id %d twice", panel.ID)
		}
		ids[panel.ID] = true
		if panel.Type != "row" && len(panel.Targets) == 0 {
			t.Errorf("panel %q has no query", panel.Title)
		}
		for _, tg := range panel.Targets {
			queries++
			if tg.Datasource.Type != "prometheus" || tg.Datasource.UID != "${datasource}" || !vars["datasource"] {
				t.Errorf("panel %q %s: datasource %+v, want the dashboard's ${datasource}", panel.Title, tg.RefID, tg.Datasource)
			}
			for _, v := range regexp.MustCompile(`\$(\w+)`).FindAllStringSubmatch(tg.Expr, -1) {
				if v[1] != "__rate_interval" && !vars[v[1]] {
					t.Errorf("panel %q uses $%s, no variable of the dashboard", panel.Title, v[1])
				}
			}
			expr, err := p.ParseExpr(subst.Replace(tg.Expr))
			if err != nil {
				t.Errorf("panel %q %s: %v", panel.Title, tg.RefID, err)
				continue
			}
			for _, m := range exprMetrics(t, expr) {
				used[m] = true
				if !names[m] {
					t.Errorf("panel %q names %s, which the daemon does not serve", panel.Title, m)
				}
			}
		}
	}
	for _, v := range d.Templating.List {
		var q struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) == nil && q.Query != "" {
			if m := regexp.MustCompile(`label_values\((\w+),`).FindStringSubmatch(q.Query); m != nil && !names[m[1]] {
				t.Errorf("variable %s queries %s, which the daemon does not serve", v.Name, m[1])
			}
		}
	}
	for _, want := range []string{
		"supervisor_rounds_total", "supervisor_round_first_delta_seconds_bucket", "supervisor_round_duration_seconds_bucket",
		"supervisor_live_app_servers", "supervisor_app_server_deaths_total", "supervisor_user_limit_hits_total",
		"supervisor_users", "supervisor_cluster_fences_total", "supervisor_tokens_total", "supervisor_budget_refusals_total",
	} {
		if !used[want] {
			t.Errorf("no panel shows %s", want)
		}
	}
	if queries == 0 {
		t.Fatal("the dashboard has no queries")
	}
}
