package schema_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/actors/policy"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/testkit/schema"
)

// The decision table (decisions.go) against the CLI's own schema and
// against what the daemon uses.

// checkCoverage fails t for every name of s with no decision and every
// decision in force for s.Version that names something s lacks.
func checkCoverage(t *testing.T, s *schema.Surface) {
	t.Helper()
	version := s.Version
	// A parse that found nothing would make the check pass vacuously.
	for k, least := range map[schema.Kind]int{schema.ClientRequest: 100, schema.ClientNotification: 1,
		schema.ServerRequest: 4, schema.ServerNotification: 50, schema.ThreadItem: 10} {
		if n := len(s.Names[k]); n < least {
			t.Errorf("codex %s: %d %s names, want at least %d: the surface was not read", version, n, k, least)
		}
	}
	c := schema.Cover(s, schema.Decisions())
	for _, n := range c.Undecided {
		t.Errorf("codex %s has %s with no decision: add it to decisionGroups (testkit/schema/decisions.go)", version, n)
	}
	for _, n := range c.Stale {
		t.Errorf("decisions.go decides %s, which codex %s does not have: delete the decision, or (for a CLI newer than the pin) bound it in decisionSpans", n, version)
	}
}

// TestDecisionsCoverPin: every method, server request, notification and
// item type of the pinned CLI has one decision, and every decision names
// one of them.
func TestDecisionsCoverPin(t *testing.T) {
	s := pinnedSurface(t)
	if s.Version != schema.PinnedVersion {
		t.Errorf("the CLI found is codex %s, the pin is %s: run scripts/install-codex", s.Version, schema.PinnedVersion)
	}
	checkCoverage(t, s)
}

// TestDecisionsCoverNewest is TestDecisionsCoverPin on the newest CLI
// (scripts/install-codex --newest, or CODEX_BIN_NEWEST): what it adds
// needs a decision before the pin moves, and what it drops is named; the
// decisions of either that the pin does not share are bounded by version
// (decisionSpans).
func TestDecisionsCoverNewest(t *testing.T) {
	bin, err := schema.FindNewestCLI()
	if err != nil {
		t.Fatal(err)
	}
	if bin == "" {
		t.Skip("no newest codex CLI: run scripts/install-codex --newest, or set CODEX_BIN_NEWEST")
	}
	checkCoverage(t, surface(t, bin))
}

// TestDecisionsTable: the table itself is well formed.
func TestDecisionsTable(t *testing.T) {
	ds := schema.Decisions()
	for _, p := range schema.CheckTable(ds, schema.PinnedVersion) {
		t.Error(p)
	}
	// CheckTable finds each kind of mistake.
	bad := []schema.Decided{
		{Kind: schema.ClientRequest, Name: "a", Decision: schema.Used, Reason: "r"},
		{Kind: schema.ClientRequest, Name: "a", Decision: schema.Used, Reason: "r"},
		{Kind: schema.ClientRequest, Name: "b", Decision: "maybe", Reason: "r"},
		{Kind: schema.ClientRequest, Name: "c", Decision: schema.NotUsed},
		{Kind: schema.Result, Name: "d", Decision: schema.NotUsed, Reason: "r"},
		{Kind: schema.ClientRequest, Name: "e", Decision: schema.NotUsed, Reason: "r", Since: "1.2"},
		{Kind: schema.ClientRequest, Name: "f", Decision: schema.NotUsed, Reason: "r", Since: "0.9.0"},
		{Kind: schema.ClientRequest, Name: "g", Decision: schema.NotUsed, Reason: "r", Gone: "1.0.0"},
		{Kind: schema.ClientRequest, Name: "h", Decision: schema.NotUsed, Reason: "r", Since: "1.0.1", Gone: "1.1.0"},
	}
	got := schema.CheckTable(bad, "1.0.0")
	// Spelled so that codexproto's TestPinSpelledOnce does not take the
	// made-up versions of this table for the pin.
	const thePin = "the" + " pin"
	want := []string{
		"client request a: decided twice",
		"client request b: unknown decision maybe",
		"client request c: empty name or reason",
		"result d: unknown family",
		`client request e: since: version "1.2" is not major.minor.patch`,
		"client request f: since 0.9.0, which " + thePin + " 1.0.0 has reached: drop the bound",
		"client request g: gone in 1.0.0, which " + thePin + " 1.0.0 has reached: delete the decision",
	}
	if !slices.Equal(got, want) {
		t.Errorf("CheckTable(bad) = %q, want %q", got, want)
	}
}

// TestCover: a name the surface adds is undecided, a name it drops makes
// its decision stale, a name of another family does not count, and a
// decision bounded to other versions is not in force.
func TestCover(t *testing.T) {
	s := &schema.Surface{Version: "1.0.0", Names: map[schema.Kind][]string{
		schema.ClientRequest: {"kept", "added", "renamed/old"},
		schema.ThreadItem:    {"plan"},
	}}
	ds := []schema.Decided{
		{Kind: schema.ClientRequest, Name: "kept", Decision: schema.Used, Reason: "r"},
		{Kind: schema.ClientRequest, Name: "dropped", Decision: schema.NotUsed, Reason: "r"},
		{Kind: schema.ServerNotification, Name: "plan", Decision: schema.NotUsed, Reason: "r"},
		// A newer CLI renames a method: the new name's decision is not
		// in force for 1.0.0 yet, the old one's no longer for 1.1.0.
		{Kind: schema.ClientRequest, Name: "renamed/new", Decision: schema.NotUsed, Reason: "r", Since: "1.1.0"},
		{Kind: schema.ClientRequest, Name: "renamed/old", Decision: schema.NotUsed, Reason: "r", Gone: "1.1.0"},
	}
	c := schema.Cover(s, ds)
	if want := []string{"client request added", "thread item plan"}; !slices.Equal(c.Undecided, want) {
		t.Errorf("Undecided = %q, want %q", c.Undecided, want)
	}
	if want := []string{"client request dropped", "server notification plan"}; !slices.Equal(c.Stale, want) {
		t.Errorf("Stale = %q, want %q", c.Stale, want)
	}
	newer := &schema.Surface{Version: "1.1.0", Names: map[schema.Kind][]string{schema.ClientRequest: {"kept", "renamed/new"}}}
	if c := schema.Cover(newer, ds[:1:1]); !slices.Equal(c.Undecided, []string{"client request renamed/new"}) {
		t.Errorf("1.1.0 without the new name's decision: Undecided = %q", c.Undecided)
	}
	if c := schema.Cover(newer, append(ds[:1:1], ds[3:]...)); len(c.Undecided)+len(c.Stale) != 0 {
		t.Errorf("1.1.0 with the bounded decisions: %+v, want nothing", c)
	}
}

// TestDecisionsUsedAreDaemonUses: a message is decided used exactly when
// DaemonUses has its row (which TestDaemonUsesComplete ties to
// codexproto's constants), and an item type exactly when codexproto
// names it (an Item* constant, which actors/eventmap maps).
func TestDecisionsUsedAreDaemonUses(t *testing.T) {
	used := map[string]bool{}
	for _, d := range schema.Decisions() {
		if d.Decision == schema.Used && d.For(schema.PinnedVersion) {
			used[string(d.Kind)+" "+d.Name] = true
		}
	}
	rows := map[string]bool{}
	for _, u := range schema.DaemonUses() {
		rows[string(u.Kind)+" "+u.Method] = true
	}
	items := 0
	for name, value := range codexprotoConsts(t) {
		if strings.HasPrefix(name, "Item") {
			rows[string(schema.ThreadItem)+" "+value] = true
			items++
		}
	}
	if items < 5 {
		t.Fatalf("found %d Item* constants in codexproto: the parse missed them", items)
	}
	for _, k := range sortedKeys(used) {
		if !rows[k] {
			t.Errorf("decisions.go: %s is used, but has no DaemonUses row (or, for an item type, no codexproto Item* constant)", k)
		}
	}
	for _, k := range sortedKeys(rows) {
		if !used[k] {
			t.Errorf("%s has a DaemonUses row (or codexproto constant), but decisions.go does not decide it used", k)
		}
	}
}

// TestDecisionsServerRequestsArePolicy: actors/policy answers each server
// request decided used, and answers "method not found" to each one
// decided refused, in line and when it puts requests to callers.
func TestDecisionsServerRequestsArePolicy(t *testing.T) {
	n := 0
	for _, d := range schema.Decisions() {
		if d.Kind != schema.ServerRequest || !d.For(schema.PinnedVersion) {
			continue
		}
		n++
		r := &codexrpc.Request{Method: d.Name, Params: json.RawMessage(`{}`)}
		_, err := policy.Decline(d.Name)
		_, asked := policy.Describe(r, policy.Bounds{})
		var we *codexrpc.WireError
		notFound := errors.As(err, &we) && we.Code == codexrpc.CodeMethodNotFound
		switch d.Decision {
		case schema.Used:
			if d.Name == "item/tool/call" { // the round log's (actors/tools.go), not the policy's
				continue
			}
			if err != nil || !asked {
				t.Errorf("%s is used, but policy answers it %v and puts it to callers: %v", d.Name, err, asked)
			}
		case schema.Refused:
			if !notFound || asked {
				t.Errorf("%s is refused as method not found, but policy answers it %v and puts it to callers: %v", d.Name, err, asked)
			}
			if !strings.Contains(d.Reason, `"method not found"`) {
				t.Errorf("%s: reason %q does not say how it is refused", d.Name, d.Reason)
			}
		default:
			t.Errorf("%s is %s: a server request is used or refused, it cannot be left unanswered", d.Name, d.Decision)
		}
	}
	if n < 4 {
		t.Errorf("%d server requests decided, want at least 4", n)
	}
}
