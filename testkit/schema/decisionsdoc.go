package schema

//go:generate go test -count=1 -run ^TestDecisionsDoc$ . -update-decisions

import (
	"errors"
	"fmt"
	"strings"
)

// The markers around the decision table in docs/PROTOCOL.md. What lies
// between them is RenderDecisions' and nobody else's.
const (
	DecisionsBegin = "<!-- BEGIN decisions: generated from testkit/schema/decisions.go by `go generate ./testkit/schema/`; do not edit -->"
	DecisionsEnd   = "<!-- END decisions -->"
)

// ErrNoDecisionsSection is returned by ReplaceDecisions for a document
// without the two markers, in order, once each.
var ErrNoDecisionsSection = errors.New("no decisions section (its BEGIN and END markers, once each, in order)")

var familyTitles = map[Kind]string{
	ClientRequest:      "Client requests",
	ClientNotification: "Client notifications",
	ServerRequest:      "Server requests",
	ServerNotification: "Server notifications",
	ThreadItem:         "Thread item types",
}

func decisionOrder() []Decision { return []Decision{Used, PassedThrough, Refused, NotUsed} }

// RenderDecisions writes the decision table for the surface of a CLI:
// the counts, then one table per family with one row per name, in the
// schema's order, with the decisions in force for s.Version. A name with
// no decision shows as undecided; a decision for a name the surface lacks
// is not shown.
func RenderDecisions(s *Surface, ds []Decided) string {
	by := map[string]Decided{}
	for _, d := range ds {
		if d.For(s.Version) {
			by[d.key()] = d
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "From codex-cli %s (`generate-json-schema --experimental`).\n\n", s.Version)
	b.WriteString("| Family |")
	for _, d := range decisionOrder() {
		fmt.Fprintf(&b, " %s |", d)
	}
	b.WriteString(" All |\n|---|")
	for range decisionOrder() {
		b.WriteString("---:|")
	}
	b.WriteString("---:|\n")
	for _, k := range Families() {
		counts := map[Decision]int{}
		for _, n := range s.Names[k] {
			counts[by[string(k)+" "+n].Decision]++
		}
		fmt.Fprintf(&b, "| %s |", familyTitles[k])
		for _, d := range decisionOrder() {
			fmt.Fprintf(&b, " %d |", counts[d])
		}
		fmt.Fprintf(&b, " %d |\n", len(s.Names[k]))
	}
	for _, k := range Families() {
		col := "Method"
		if k == ThreadItem {
			col = "Type"
		}
		fmt.Fprintf(&b, "\n#### %s (%d)\n\n| %s | Decision | Reason |\n|---|---|---|\n", familyTitles[k], len(s.Names[k]), col)
		for _, n := range s.Names[k] {
			d, ok := by[string(k)+" "+n]
			if !ok {
				fmt.Fprintf(&b, "| `%s` | **undecided** | |\n", n)
				continue
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", n, d.Decision, strings.ReplaceAll(d.Reason, "|", `\|`))
		}
	}
	return b.String()
}

// ReplaceDecisions returns doc with the text between its decision markers
// replaced by table (a blank line on either side).
func ReplaceDecisions(doc, table string) (string, error) {
	if strings.Count(doc, DecisionsBegin) != 1 || strings.Count(doc, DecisionsEnd) != 1 {
		return "", ErrNoDecisionsSection
	}
	before, rest, _ := strings.Cut(doc, DecisionsBegin)
	_, after, ok := strings.Cut(rest, DecisionsEnd)
	if !ok {
		return "", ErrNoDecisionsSection
	}
	return before + DecisionsBegin + "\n\n" + strings.TrimSpace(table) + "\n\n" + DecisionsEnd + after, nil
}
