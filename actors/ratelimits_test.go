package actors

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

// A rate-limits request answers every bucket codex reports, by limit id,
// with its windows and credits; null windows stay absent.
func TestRateLimitsBuckets(t *testing.T) {
	h := fakeHarness(t, fakeappserver.Config{RateLimits: json.RawMessage(`{
		"rateLimits": {"limitId": "codex", "limitName": null, "primary": {"usedPercent": 42, "windowDurationMins": 300, "resetsAt": 1796217815}, "secondary": null, "credits": null, "planType": "plus", "rateLimitReachedType": null},
		"rateLimitsByLimitId": {
			"zeta": {"limitId": null, "limitName": "Zeta", "primary": {"usedPercent": 100, "windowDurationMins": null, "resetsAt": null}, "secondary": null, "credits": {"hasCredits": true, "unlimited": false, "balance": "12.5"}, "planType": null, "rateLimitReachedType": "rate_limit_reached"},
			"codex": {"limitId": "codex", "limitName": null, "primary": {"usedPercent": 42, "windowDurationMins": 300, "resetsAt": 1796217815}, "secondary": {"usedPercent": 7, "windowDurationMins": 10080, "resetsAt": 1796800000}, "credits": null, "planType": "plus", "rateLimitReachedType": null}
		}}`)}, nil)
	c := h.caller()
	h.engine.SendWithSender(h.root, messages.RateLimitsRequest{User: "quinn"}, c.pid)
	res := expect[messages.RateLimitsResponse](t, c)
	if res.Error != "" || res.User != "quinn" || len(res.Limits) != 2 {
		t.Fatalf("RateLimitsResponse = %+v, want the two buckets", res)
	}
	codex, zeta := res.Limits[0], res.Limits[1]
	if codex.LimitID != "codex" || codex.PlanType != "plus" || codex.Primary == nil || *codex.Primary != (messages.RateLimitWindow{UsedPercent: 42, WindowMinutes: 300, ResetsAtUnix: 1796217815}) ||
		codex.Secondary == nil || codex.Secondary.WindowMinutes != 10080 || codex.Credits != nil || codex.ReachedType != "" {
		t.Errorf("codex bucket = %+v (primary %+v, secondary %+v)", codex, codex.Primary, codex.Secondary)
	}
	if zeta.LimitID != "zeta" || zeta.LimitName != "Zeta" || zeta.ReachedType != "rate_limit_reached" || zeta.Secondary != nil ||
		zeta.Primary == nil || *zeta.Primary != (messages.RateLimitWindow{UsedPercent: 100}) || zeta.Credits == nil || *zeta.Credits != (messages.Credits{HasCredits: true, Balance: "12.5"}) {
		t.Errorf("zeta bucket = %+v (primary %+v, credits %+v)", zeta, zeta.Primary, zeta.Credits)
	}
}

// Without a ChatGPT login the real CLI has no rate limits to read: the
// reply says so, and nothing else.
func TestRateLimitsRealCLIWithoutLogin(t *testing.T) {
	h := newHarness(t, nil)
	c := h.caller()
	h.engine.SendWithSender(h.root, messages.RateLimitsRequest{User: "rhea"}, c.pid)
	res := expect[messages.RateLimitsResponse](t, c)
	if !strings.Contains(res.Error, "codex account authentication required to read rate limits") || len(res.Limits) != 0 || res.User != "rhea" {
		t.Errorf("RateLimitsResponse = %+v, want the CLI's authentication error", res)
	}
	// An invalid request is rejected by the root.
	h.engine.SendWithSender(h.root, messages.RateLimitsRequest{}, c.pid)
	if r := expect[messages.Rejected](t, c); !strings.Contains(r.Reason, "user is empty") {
		t.Errorf("rejected: %q", r.Reason)
	}
}
