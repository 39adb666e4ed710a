package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

// Stats summarizes samples of one side of a row.
type Stats struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
}

// Row is one measurement: the daemon's side against its baseline, in the
// row's unit. Ratio is Daemon.P50 / Base.P50 (for rates too: below 1 the
// daemon carries less), RatioP99 the same of the p99s. Config names how
// the daemon side ran (ConfigIsoOff unless a row says otherwise).
type Row struct {
	Name     string  `json:"name"`
	Unit     string  `json:"unit"` // ms, µs, events/s, KiB, MiB
	Config   string  `json:"config"`
	Daemon   Stats   `json:"daemon"`
	BaseName string  `json:"base_name"`
	Base     Stats   `json:"base"`
	Ratio    float64 `json:"ratio_p50"`
	RatioP99 float64 `json:"ratio_p99"`
	Note     string  `json:"note,omitempty"`
}

// Result is one run.
type Result struct {
	Started time.Time `json:"started"`
	Took    string    `json:"took"`
	Codex   string    `json:"codex"`
	Load    string    `json:"load"` // /proc/loadavg at the start
	Options Counts    `json:"options"`
	Rows    []Row     `json:"rows"`
}

// statsOf summarizes samples (nearest-rank percentiles).
func statsOf(xs []float64) Stats {
	if len(xs) == 0 {
		return Stats{} // N 0: no number (JSON has no NaN)
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return Stats{N: len(s), P50: rank(0.50), P99: rank(0.99)}
}

func ms(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / float64(time.Millisecond)
	}
	return out
}

func us(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / float64(time.Microsecond)
	}
	return out
}

// row builds a row from both sides' samples.
func row(name, unit string, daemon []float64, baseName string, base []float64, note string) Row {
	r := Row{Name: name, Unit: unit, Daemon: statsOf(daemon), BaseName: baseName, Base: statsOf(base), Note: note}
	if r.Base.P50 != 0 {
		r.Ratio = r.Daemon.P50 / r.Base.P50
	}
	if r.Base.P99 != 0 {
		r.RatioP99 = r.Daemon.P99 / r.Base.P99
	}
	return r
}

// Complete reports whether every row has samples on both sides and only
// finite numbers (a ratio is 0 when the baseline's p50 is 0).
func (r *Result) Complete() error {
	if len(r.Rows) == 0 {
		return fmt.Errorf("no rows")
	}
	for _, x := range r.Rows {
		for _, v := range []float64{x.Daemon.P50, x.Daemon.P99, x.Base.P50, x.Base.P99, x.Ratio, x.RatioP99} {
			if math.IsNaN(v) || math.IsInf(v, 0) || x.Daemon.N == 0 || x.Base.N == 0 {
				return fmt.Errorf("row %q has no number (%+v)", x.Name, x)
			}
		}
	}
	return nil
}

// WriteTable prints the rows as an aligned table.
func (r *Result) WriteTable(w io.Writer) error {
	width := len("measurement")
	for _, x := range r.Rows {
		width = max(width, utf8.RuneCountInString(x.Name))
	}
	name := func(s string) string { return s + strings.Repeat(" ", width-utf8.RuneCountInString(s)) }
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\tunit\tdaemon p50\tp99\tn\tbaseline p50\tp99\tn\tratio p50\tp99\t  daemon as\t  baseline\n", name("measurement"))
	for _, x := range r.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%d\t%.2f\t%.2f\t  %s\t  %s\n", name(x.Name), x.Unit,
			num(x.Daemon.P50), num(x.Daemon.P99), x.Daemon.N, num(x.Base.P50), num(x.Base.P99), x.Base.N, x.Ratio, x.RatioP99, x.Config, x.BaseName)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var notes []string
	for _, x := range r.Rows {
		if x.Note != "" {
			notes = append(notes, fmt.Sprintf("  %s: %s", x.Name, x.Note))
		}
	}
	_, err := fmt.Fprintf(w, "\ncodex %s, load at start %s, took %s\n%s\n", r.Codex, r.Load, r.Took, strings.Join(notes, "\n"))
	return err
}

// WriteMarkdown prints the rows as a Markdown table.
func (r *Result) WriteMarkdown(w io.Writer) error {
	fmt.Fprintln(w, "| measurement | daemon as | unit | daemon p50 | daemon p99 | baseline | baseline p50 | baseline p99 | ratio p50 | ratio p99 | n |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, x := range r.Rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %.2f | %.2f | %d / %d |\n", x.Name, x.Config, x.Unit,
			num(x.Daemon.P50), num(x.Daemon.P99), x.BaseName, num(x.Base.P50), num(x.Base.P99), x.Ratio, x.RatioP99, x.Daemon.N, x.Base.N)
	}
	return nil
}

// WriteJSON writes the result as indented JSON.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func num(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "-"
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}
