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

// OldestTestedCLI is the oldest codex CLI the real-CLI tests have passed
// on: the tested range runs from it to the pin. The code needs no CLI this
// old (only AdditionalContextSince marks a feature, and older CLIs get the
// context folded into the text), but nothing older was ever run against
// it. When the pin moves, this stays where it was unless the older CLI
// stops being supported (docs/PROTOCOL.md, "Taking a new codex release").
var OldestTestedCLI = Version{0, 169, 0}

// PinnedCLI is PinnedCLIVersion as a Version. A pin that does not parse is
// a bug that TestPinSpelledOnce reports, so it panics.
func PinnedCLI() Version {
	v, err := ParseVersion(PinnedCLIVersion)
	if err != nil {
		panic(fmt.Sprintf("codexproto/cli-version: %v", err))
	}
	return v
}

// Tested reports whether v is in the tested range: OldestTestedCLI to the
// pin, both included. The daemon warns about any other CLI.
func (v Version) Tested() bool { return v.AtLeast(OldestTestedCLI) && PinnedCLI().AtLeast(v) }

// TestedRange names the tested range for logs: "0.169.0 to 0.171.0", or
// the one version when the two ends meet.
func TestedRange() string {
	if p := PinnedCLI(); p != OldestTestedCLI {
		return OldestTestedCLI.String() + " to " + p.String()
	}
	return OldestTestedCLI.String()
}

// ParseVersion reads "major.minor.patch", dropping a pre-release or build
// suffix ("0.171.0-alpha.1" is 0.171.0).
func ParseVersion(s string) (Version, error) {
	if i := strings.IndexAny(s, "-+"); i >= 0 {
		s = s[:i]
	}
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return Version{}, fmt.Errorf("version %q is not major.minor.patch", truncate(s, 40))
	}
	var n [3]int
	for i, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil || x < 0 {
			return Version{}, fmt.Errorf("version %q: bad number %q", truncate(s, 40), truncate(p, 20))
		}
		n[i] = x
	}
	return Version{n[0], n[1], n[2]}, nil
}

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
	v, err := ParseVersion(rest)
	if err != nil {
		return Version{}, fmt.Errorf("user agent %q: %w", truncate(ua, 80), err)
	}
	return v, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
