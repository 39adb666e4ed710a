package turninput

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/meshweaver/supervisor/actors/internal/textcut"
	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/messages"
)

// ErrInput wraps the errors of a round's inputs: the round ends rejected.
var ErrInput = errors.New("invalid round input")

// Bounds are the operator's bounds on a round's sandbox and approval
// policy (serve flags), and the defaults of a round that asks for none.
type Bounds struct {
	// MaxSandbox is the most permissive sandbox a round may ask for.
	MaxSandbox string
	// Approvals are the approval policies a round may ask for.
	Approvals []string
	// Sandbox and Approval are used when the round asks for none.
	Sandbox, Approval string
}

// withDefaults fills what the operator left unset: the daemon's defaults
// (read-only, never), its sandbox as the bound, its approval policy as the
// only one allowed.
func (b Bounds) withDefaults() Bounds {
	b.Sandbox = cmp.Or(b.Sandbox, messages.SandboxReadOnly)
	b.Approval = cmp.Or(b.Approval, messages.ApprovalNever)
	b.MaxSandbox = cmp.Or(b.MaxSandbox, b.Sandbox)
	if len(b.Approvals) == 0 {
		b.Approvals = []string{b.Approval}
	}
	return b
}

// Check checks the operator's bounds themselves: a known MaxSandbox with
// the default Sandbox within it, known approval policies, the default
// Approval among them. Its errors are the operator's, not a round's.
func (b Bounds) Check() error {
	if b.MaxSandbox != "" {
		max, ok := sandboxRank[b.MaxSandbox]
		if !ok {
			return fmt.Errorf("max sandbox %q is not a sandbox mode", b.MaxSandbox)
		}
		if sandboxRank[b.Sandbox] > max {
			return fmt.Errorf("the sandbox %s is above the max sandbox %s", b.Sandbox, b.MaxSandbox)
		}
	}
	for _, a := range b.Approvals {
		if !slices.Contains(approvalSafety, a) {
			return fmt.Errorf("approval policy %q is not one of %s", a, strings.Join(approvalSafety, ", "))
		}
	}
	if len(b.Approvals) > 0 && !slices.Contains(b.Approvals, b.Approval) {
		return fmt.Errorf("the allowed approval policies do not include the default %s", b.Approval)
	}
	return nil
}

// sandboxRank orders sandbox modes by what they let a command do.
var sandboxRank = map[string]int{
	messages.SandboxReadOnly:         0,
	messages.SandboxWorkspaceWrite:   1,
	messages.SandboxDangerFullAccess: 2,
}

// approvalSafety orders approval policies by how much codex asks (and the
// daemon, without auto_approve, declines): untrusted asks the most.
var approvalSafety = []string{messages.ApprovalUntrusted, messages.ApprovalOnRequest, messages.ApprovalNever}

// clampPolicy gives the sandbox and approval policy a round runs with: what
// it asked for, within the operator's bounds. A sandbox above MaxSandbox
// becomes MaxSandbox; an approval policy that is not allowed becomes the
// allowed one that asks the most. Each clamp is described in notes, for the
// caller. An unknown mode (validation lets none through) is an error.
func clampPolicy(sandbox, approval string, b Bounds) (outSandbox, outApproval string, notes []string, err error) {
	outSandbox, outApproval = cmp.Or(sandbox, b.Sandbox), cmp.Or(approval, b.Approval)
	got, ok := sandboxRank[outSandbox]
	max, okMax := sandboxRank[b.MaxSandbox]
	if !ok || !okMax {
		return "", "", nil, fmt.Errorf("%w: sandbox %q or bound %q is not a sandbox mode", ErrInput, outSandbox, b.MaxSandbox)
	}
	if got > max {
		notes = append(notes, fmt.Sprintf("sandbox %s is above this daemon's bound; the round runs with %s", outSandbox, b.MaxSandbox))
		outSandbox = b.MaxSandbox
	}
	if approval == "" {
		return outSandbox, outApproval, notes, nil // the operator's own default (even on-failure)
	}
	if !slices.Contains(approvalSafety, outApproval) {
		return "", "", nil, fmt.Errorf("%w: approval policy %q is not one of %s", ErrInput, outApproval, strings.Join(approvalSafety, ", "))
	}
	if !slices.Contains(b.Approvals, outApproval) {
		safest := ""
		for _, a := range approvalSafety {
			if slices.Contains(b.Approvals, a) {
				safest = a
				break
			}
		}
		if safest == "" {
			return "", "", nil, fmt.Errorf("%w: this daemon allows no approval policy", ErrInput)
		}
		notes = append(notes, fmt.Sprintf("approval policy %s is not allowed by this daemon; the round runs with %s", outApproval, safest))
		outApproval = safest
	}
	return outSandbox, outApproval, notes, nil
}

// outputSchema checks a round's output schema (a JSON object within
// MaxOutputSchemaLen) and returns it for turn/start; nil when there is none.
func outputSchema(text string) (json.RawMessage, error) {
	if text == "" {
		return nil, nil
	}
	if len(text) > messages.MaxOutputSchemaLen {
		return nil, fmt.Errorf("%w: output schema is %d bytes, max %d", ErrInput, len(text), messages.MaxOutputSchemaLen)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(text), &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("%w: output schema is not a JSON object", ErrInput)
	}
	return json.RawMessage(text), nil
}

// imageInputs turns a round's images into turn/start input items: a data
// URL as an image item, a workspace path as a localImage item with the
// file's real path. A path must resolve, symlinks followed, to a regular
// file of at most MaxImageLen bytes inside workspace. Errors name the
// image by index, never its data.
func imageInputs(images []messages.ImageInput, workspace string) ([]codexproto.InputItem, error) {
	if len(images) == 0 {
		return nil, nil
	}
	root, err := filepath.EvalSymlinks(workspace)
	if err != nil {
		return nil, fmt.Errorf("resolving the workspace: %w", err)
	}
	out := make([]codexproto.InputItem, 0, len(images))
	for i, im := range images {
		switch {
		case im.DataURL != "" && im.Path == "":
			if _, err := messages.DecodeDataURL(im.DataURL); err != nil {
				return nil, fmt.Errorf("%w: image %d: %v", ErrInput, i, err)
			}
			out = append(out, codexproto.InputItem{Type: codexproto.InputImage, URL: im.DataURL})
		case im.Path != "" && im.DataURL == "":
			p, err := workspaceFile(root, im.Path)
			if err != nil {
				return nil, fmt.Errorf("%w: image %d: %v", ErrInput, i, err)
			}
			out = append(out, codexproto.InputItem{Type: codexproto.InputLocalImage, Path: p})
		default:
			return nil, fmt.Errorf("%w: image %d needs exactly one of data_url and path", ErrInput, i)
		}
	}
	return out, nil
}

// workspaceFile resolves rel inside root (itself resolved): the real path
// of a regular file of at most MaxImageLen bytes that stays inside root.
func workspaceFile(root, rel string) (string, error) {
	if rel == "" || filepath.IsAbs(rel) || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("path %q is not inside the workspace", textcut.Bytes(rel, 200))
	}
	real, err := filepath.EvalSymlinks(filepath.Join(root, rel))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("path %q does not exist in the workspace", textcut.Bytes(rel, 200))
		}
		return "", fmt.Errorf("path %q: %w", textcut.Bytes(rel, 200), err)
	}
	if r, err := filepath.Rel(root, real); err != nil || !filepath.IsLocal(r) {
		return "", fmt.Errorf("path %q leads out of the workspace", textcut.Bytes(rel, 200))
	}
	fi, err := os.Stat(real)
	switch {
	case err != nil:
		return "", fmt.Errorf("path %q: %w", textcut.Bytes(rel, 200), err)
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("path %q is not a regular file", textcut.Bytes(rel, 200))
	case fi.Size() > messages.MaxImageLen:
		return "", fmt.Errorf("path %q is %d bytes, max %d", textcut.Bytes(rel, 200), fi.Size(), messages.MaxImageLen)
	}
	return real, nil
}

// contextKind is an entry's kind, application by default.
func contextKind(e messages.ContextEntry) string {
	if e.Kind == messages.ContextUntrusted {
		return codexproto.ContextUntrusted
	}
	return codexproto.ContextApplication
}

// nativeContext is turn/start's additionalContext map of a round's
// entries; nil when there are none.
func nativeContext(entries []messages.ContextEntry) map[string]codexproto.AdditionalContextEntry {
	if len(entries) == 0 {
		return nil
	}
	out := make(map[string]codexproto.AdditionalContextEntry, len(entries))
	for _, e := range entries {
		out[e.Key] = codexproto.AdditionalContextEntry{Kind: contextKind(e), Value: e.Value}
	}
	return out
}

// foldContext appends a round's context entries to its text, for a CLI
// that predates additionalContext, in the tags the CLI itself would use:
// <key>value</key> for application context, <external_key>value</external_key>
// for untrusted context.
func foldContext(text string, entries []messages.ContextEntry) string {
	if len(entries) == 0 {
		return text
	}
	var b strings.Builder
	b.WriteString(text)
	for _, e := range entries {
		tag := e.Key
		if contextKind(e) == codexproto.ContextUntrusted {
			tag = "external_" + e.Key
		}
		fmt.Fprintf(&b, "\n\n<%s>\n%s\n</%s>", tag, e.Value, tag)
	}
	return b.String()
}

// Params builds turn/start for a round: base (thread, text,
// model, effort, client id, summary) with the round's images, output
// schema, context (native when the CLI of version v supports it, else
// folded into the text) and its sandbox and approval policy within b.
// notes are the clamps to tell the caller about.
func Params(base codexproto.TurnStartParams, req messages.StartRound, workspace string, v codexproto.Version, b Bounds) (p codexproto.TurnStartSurfaceParams, notes []string, err error) {
	p.TurnStartParams = base
	text := req.Text
	if v.SupportsAdditionalContext() {
		p.AdditionalContext = nativeContext(req.AdditionalContext)
	} else {
		text = foldContext(text, req.AdditionalContext)
	}
	p.Input = []codexproto.InputItem{{Type: codexproto.InputText, Text: text}}
	images, err := imageInputs(req.Images, workspace)
	if err != nil {
		return p, nil, err
	}
	p.Input = append(p.Input, images...)
	if p.OutputSchema, err = outputSchema(req.OutputSchema); err != nil {
		return p, nil, err
	}
	// Always sent: codex keeps a turn's policy as the thread's default, so
	// a round that asks for none must not inherit an earlier round's.
	sandbox, approval, notes, err := clampPolicy(req.Sandbox, req.ApprovalPolicy, b.withDefaults())
	if err != nil {
		return p, nil, err
	}
	p.SandboxPolicy = codexproto.PolicyOf(sandbox)
	p.ApprovalPolicy = approval
	return p, notes, nil
}
