// Package codexhome prepares a CODEX_HOME that points the real codex CLI at a
// loopback mock model (package demomodel), and finds the codex binary.
//
// The CLI is configured with a custom model provider "mock" that speaks the
// Responses API over plain HTTP with no auth and no retries. The same
// settings are available two ways: as `codex app-server -c key=value` pairs
// ([Overrides]: demomodel.Overrides, what the daemon's demo passes) and as a
// config.toml ([WriteConfig], [MkHome]). The config.toml may also name a
// model catalog ([CatalogJSON]) that describes "mock-model"; with it, codex
// offers the freeform apply_patch tool and stops warning about unknown model
// metadata.
//
// It is test code: the daemon does not link it. It does not import
// "testing"; tests wrap [MkHome] with t.TempDir themselves.
package codexhome
