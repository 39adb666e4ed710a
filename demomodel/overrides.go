package demomodel

import (
	"fmt"
	"strings"
)

// Names the CLI settings give the demo model's provider and its model.
const (
	// ProviderID is the model_providers key of the demo model's provider.
	ProviderID = "mock"
	// Model is the model slug codex asks the demo model for.
	Model = "mock-model"
)

// Overrides returns `key=value` pairs (values in TOML syntax) that select the
// demo model at modelBaseURL (a Server's URL, ending in /v1) as codex's
// provider. Pass each as `codex app-server -c <pair>` (actors.Config's
// Overrides, serve's --codex-override).
func Overrides(modelBaseURL string) []string {
	q := TOMLString
	p := "model_providers." + ProviderID + "."
	return []string{
		"model_provider=" + q(ProviderID),
		"model=" + q(Model),
		p + "name=" + q("Mock model"),
		p + "base_url=" + q(modelBaseURL),
		p + "wire_api=" + q("responses"),
		p + "requires_openai_auth=false",
		// Errors reach the client at once: no silent request retries and no
		// "Reconnecting..." stream retries.
		p + "request_max_retries=0",
		p + "stream_max_retries=0",
		// No network traffic besides the demo model.
		"check_for_update_on_startup=false",
		"analytics.enabled=false",
	}
}

// TOMLString quotes s as a TOML basic string, as a -c value needs it.
func TOMLString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
