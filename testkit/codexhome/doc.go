// Package codexhome prepares a CODEX_HOME that points the real codex CLI at a
// loopback mock model (see package mockmodel), and finds the codex binary.
//
// The CLI is configured with a custom model provider "mock" that speaks the
// Responses API over plain HTTP with no auth and no retries. The same
// settings are available two ways: as `codex app-server -c key=value` pairs
// ([Overrides]) and as a config.toml ([WriteConfig], [MkHome]). The
// config.toml may also name a model catalog ([CatalogJSON]) that describes
// "mock-model"; with it, codex offers the freeform apply_patch tool and stops
// warning about unknown model metadata.
//
// The package does not import "testing", so the daemon's demo command can use
// it too. Tests wrap [MkHome] with t.TempDir themselves.
package codexhome
