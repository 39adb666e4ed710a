package codexproto

import (
	_ "embed"
	"fmt"
	"strconv"
	"strings"
)

// pinFile is codexproto/cli-version, the one place the pin is written:
// scripts/install-codex and the Dockerfile read the same file, and
// TestPinSpelledOnce fails on any other spelling of a pin.
//
//go:embed cli-version
var pinFile string

// PinnedCLIVersion is the codex CLI version the project is built and
// tested against ("0.171.0"), read from codexproto/cli-version.
var PinnedCLIVersion = strings.TrimSpace(pinFile)

// Version is the CLI's semantic version.
type Version struct {
	Major, Minor, Patch int
}

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// AtLeast reports whether v >= o.
func (v Version) AtLeast(o Version) bool {
	if v.Major != o.Major {
		return v.Major > o.Major
	}
	if v.Minor != o.Minor {
		return v.Minor > o.Minor
	}
	return v.Patch >= o.Patch
}

// AdditionalContextSince is the first CLI that honours turn/start's
// additionalContext; older ones drop the field silently.
var AdditionalContextSince = Version{0, 135, 0}

// SupportsAdditionalContext reports whether the CLI honours additionalContext.
func (v Version) SupportsAdditionalContext() bool { return v.AtLeast(AdditionalContextSince) }

// ParseUserAgent reads the CLI version from initialize's userAgent,
// "<originator>/<semver> (<os>; <arch>) …". The originator is the client
// name the daemon sent, so it is not checked.
func ParseUserAgent(ua string) (Version, error) {
	_, rest, ok := strings.Cut(ua, "/")
	if !ok {
		return Version{}, fmt.Errorf("user agent %q: no version", truncate(ua, 80))
	}
	if i := strings.IndexAny(rest, " ("); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.IndexAny(rest, "-+"); i >= 0 { // pre-release or build metadata
		rest = rest[:i]
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 {
		return Version{}, fmt.Errorf("user agent %q: version is not major.minor.patch", truncate(ua, 80))
	}
	var n [3]int
	for i, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil || x < 0 {
			return Version{}, fmt.Errorf("user agent %q: bad version number %q", truncate(ua, 80), truncate(p, 20))
		}
		n[i] = x
	}
	return Version{n[0], n[1], n[2]}, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
