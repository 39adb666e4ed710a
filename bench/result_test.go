package bench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestStatsOf(t *testing.T) {
	seq := func(n int) []float64 {
		var xs []float64
		for i := n; i >= 1; i-- { // unsorted on purpose
			xs = append(xs, float64(i))
		}
		return xs
	}
	for _, tc := range []struct {
		name string
		xs   []float64
		want Stats
	}{
		{"none", nil, Stats{}},
		{"one", []float64{7}, Stats{N: 1, P50: 7, P99: 7}},
		{"two", []float64{9, 1}, Stats{N: 2, P50: 1, P99: 9}},
		{"hundred", seq(100), Stats{N: 100, P50: 50, P99: 99}},
		{"thousand", seq(1000), Stats{N: 1000, P50: 500, P99: 990}},
	} {
		if got := statsOf(tc.xs); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestCompleteAndOutputs(t *testing.T) {
	good := &Result{Rows: []Row{row("warm", "ms", []float64{2, 8}, "direct", []float64{1, 2}, "a note")}}
	good.Rows[0].Config = ConfigUIDBwrap
	if err := good.Complete(); err != nil {
		t.Errorf("complete result: %v", err)
	}
	if r := good.Rows[0]; r.Ratio != 2 || r.RatioP99 != 4 {
		t.Errorf("ratios %v / %v, want 2 (p50 2 over p50 1) / 4 (p99 8 over 2)", r.Ratio, r.RatioP99)
	}
	for _, bad := range []*Result{
		{},
		{Rows: []Row{row("no daemon side", "ms", nil, "direct", []float64{1}, "")}},
		{Rows: []Row{row("no baseline", "ms", []float64{1}, "direct", nil, "")}},
	} {
		if err := bad.Complete(); err == nil {
			t.Errorf("%+v: Complete found nothing missing", bad.Rows)
		}
	}
	zero := &Result{Rows: []Row{row("zero baseline", "KiB", []float64{1}, "direct", []float64{0}, "")}}
	if err := zero.Complete(); err != nil || zero.Rows[0].Ratio != 0 {
		t.Errorf("a measured zero: %v, ratio %v (want complete, ratio 0)", err, zero.Rows[0].Ratio)
	}
	// A row without numbers still encodes (JSON has no NaN).
	half := &Result{Rows: []Row{row("no baseline", "ms", []float64{1}, "direct", nil, "")}}
	var js bytes.Buffer
	if err := half.WriteJSON(&js); err != nil || !json.Valid(js.Bytes()) {
		t.Errorf("JSON of an incomplete row: %v %s", err, js.String())
	}
	var table, md bytes.Buffer
	if err := good.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if err := good.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "warm") || !strings.Contains(table.String(), "2.00") || !strings.Contains(table.String(), "warm: a note") {
		t.Errorf("table:\n%s", table.String())
	}
	if lines := strings.Split(strings.TrimSpace(md.String()), "\n"); len(lines) != 3 || lines[2] != "| warm | uid+bwrap | ms | 2.00 | 8.00 | direct | 1.00 | 2.00 | 2.00 | 4.00 | 2 / 2 |" {
		t.Errorf("markdown:\n%s", md.String())
	}
}
