package schema_test

import (
	"errors"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/testkit/schema"
)

// The decision table's copy in docs/PROTOCOL.md.

var updateDecisions = flag.Bool("update-decisions", false, "rewrite the decision table in docs/PROTOCOL.md")

const protocolDoc = "../../docs/PROTOCOL.md"

// TestDecisionsDoc: the table in docs/PROTOCOL.md is what
// RenderDecisions writes for the pinned CLI; -update-decisions (or go
// generate ./testkit/schema/) rewrites it.
func TestDecisionsDoc(t *testing.T) {
	s := pinnedSurface(t)
	if s.Version != schema.PinnedVersion {
		t.Fatalf("the CLI found is codex %s, the pin is %s: the table is the pin's; run scripts/install-codex", s.Version, schema.PinnedVersion)
	}
	raw, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	want, err := schema.ReplaceDecisions(doc, schema.RenderDecisions(s, schema.Decisions()))
	if err != nil {
		t.Fatalf("%s: %v", protocolDoc, err)
	}
	if want == doc {
		return
	}
	if *updateDecisions {
		if err := os.WriteFile(protocolDoc, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the decision table in %s", protocolDoc)
		return
	}
	got, wantLines := strings.Split(doc, "\n"), strings.Split(want, "\n")
	line := 0
	for line < len(got) && line < len(wantLines) && got[line] == wantLines[line] {
		line++
	}
	var gotLine, wantLine string
	if line < len(got) {
		gotLine = got[line]
	}
	if line < len(wantLines) {
		wantLine = wantLines[line]
	}
	t.Errorf("%s:%d: the decision table is stale: got %q, want %q; run go generate ./testkit/schema/", protocolDoc, line+1, gotLine, wantLine)
}

// TestReplaceDecisions: the section is found only between its two
// markers, and only what lies between them changes.
func TestReplaceDecisions(t *testing.T) {
	doc := "head\n" + schema.DecisionsBegin + "\nold\n" + schema.DecisionsEnd + "\ntail\n"
	got, err := schema.ReplaceDecisions(doc, "new\n")
	if want := "head\n" + schema.DecisionsBegin + "\n\nnew\n\n" + schema.DecisionsEnd + "\ntail\n"; err != nil || got != want {
		t.Errorf("ReplaceDecisions = %q, %v; want %q", got, err, want)
	}
	for _, bad := range []string{"no markers", schema.DecisionsEnd + schema.DecisionsBegin, doc + doc} {
		if _, err := schema.ReplaceDecisions(bad, "x"); !errors.Is(err, schema.ErrNoDecisionsSection) {
			t.Errorf("ReplaceDecisions(%q) = %v, want ErrNoDecisionsSection", bad, err)
		}
	}
}

// TestRenderDecisions: one row per name of the surface in its order, an
// undecided name shown as such, a stale decision left out, the counts.
func TestRenderDecisions(t *testing.T) {
	s := &schema.Surface{Version: "9.9.9", Names: map[schema.Kind][]string{schema.ClientRequest: {"b/b", "a/a"}}}
	out := schema.RenderDecisions(s, []schema.Decided{
		{Kind: schema.ClientRequest, Name: "a/a", Decision: schema.Refused, Reason: "x | y"},
		{Kind: schema.ClientRequest, Name: "a/a", Decision: schema.Used, Reason: "not yet in force", Since: "10.0.0"},
		{Kind: schema.ClientRequest, Name: "gone", Decision: schema.Used, Reason: "r"},
	})
	for _, want := range []string{
		"codex-cli 9.9.9",
		"| Client requests | 0 | 0 | 1 | 0 | 2 |",
		"#### Client requests (2)",
		"| `b/b` | **undecided** | |\n| `a/a` | refused | x \\| y |\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("RenderDecisions lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "gone") || strings.Contains(out, "not yet in force") {
		t.Errorf("RenderDecisions shows a stale decision, or one not in force:\n%s", out)
	}
}
