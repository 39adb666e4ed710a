package actors

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// threadSettings are what a thread is loaded with (thread/start or
// thread/resume): a thread loaded in an app-server keeps them, and ignores
// a later resume's.
type threadSettings struct {
	Cwd                   string         `json:"cwd"`
	Sandbox               string         `json:"sandbox"`
	ApprovalPolicy        string         `json:"approvalPolicy"`
	DeveloperInstructions string         `json:"developerInstructions"`
	Config                map[string]any `json:"config"` // the MCP overlay
}

// fingerprint identifies the settings: a thread loaded with the same
// fingerprint runs a round as it is, without an unload and a resume. It is
// a hash of every setting, the MCP overlay (and its bearer token) among
// them; a setting that may change without needing a reload would be left
// out here.
func (s threadSettings) fingerprint() string {
	b, err := json.Marshal(s) // map keys are sorted: the encoding is stable
	if err != nil {
		return "" // cannot happen: plain data; "" never matches a loaded thread's
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// roundSettings are the settings a round (or a warm-up for it) loads its
// thread with.
func roundSettings(cfg *Config, developerInstructions, mcpURL, mcpToken string) threadSettings {
	return threadSettings{Cwd: cfg.Workspace, Sandbox: cfg.Sandbox, ApprovalPolicy: cfg.ApprovalPolicy,
		DeveloperInstructions: developerInstructions, Config: overlay(mcpURL, mcpToken)}
}
