package schema

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ThreadItem is the family of the item types a thread's items come in:
// the `type` tags of the union that item/started and item/completed carry
// as their `item` (ThreadItem in codex 0.171.0). It is not a message
// family: a Validator knows no ThreadItem lines.
const ThreadItem Kind = "thread item"

// Families are the kinds of a [Surface], in the order the decision table
// shows them.
func Families() []Kind {
	return []Kind{ClientRequest, ClientNotification, ServerRequest, ServerNotification, ThreadItem}
}

// Surface is what one CLI's protocol offers: the methods of its four
// unions and its thread item types, each list in the schema's own order.
type Surface struct {
	// Version is the CLI's ("0.171.0"); "" when unknown (LoadSurface),
	// and then every decision is in force for it.
	Version string
	Names   map[Kind][]string
}

// Has reports whether s offers name in family k.
func (s *Surface) Has(k Kind, name string) bool {
	for _, n := range s.Names[k] {
		if n == name {
			return true
		}
	}
	return false
}

// BuildSurface generates bin's bundle with its experimental methods
// ([GenerateExperimental]) into a temporary directory, reads its surface
// and its version, and removes the directory.
func BuildSurface(bin string) (*Surface, error) {
	version, err := CLIVersion(bin)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "codex-surface-"+version+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := GenerateExperimental(bin, dir); err != nil {
		return nil, err
	}
	s, err := LoadSurface(dir)
	if err != nil {
		return nil, err
	}
	s.Version = version
	return s, nil
}

// LoadSurface reads the surface of the bundle that Generate or
// GenerateExperimental wrote into dir. The item types are found by
// following item/started's params to its `item` property and that to a
// union of objects tagged by a one-value `type` enum; a bundle laid out
// otherwise is an error, never an empty list.
func LoadSurface(dir string) (*Surface, error) {
	s := &Surface{Names: map[Kind][]string{}}
	var notes map[string]any
	for _, u := range unions {
		path := filepath.Join(dir, u.file)
		doc, err := readPlainJSON(path)
		if err != nil {
			return nil, fmt.Errorf("loading surface: %w", err)
		}
		branches, _ := doc["oneOf"].([]any)
		if len(branches) == 0 {
			return nil, fmt.Errorf("loading surface %s: root has no oneOf union", path)
		}
		for i, b := range branches {
			method, _ := branchMethod(b)
			if method == "" {
				return nil, fmt.Errorf("loading surface %s: oneOf/%d has no method enum", path, i)
			}
			s.Names[u.kind] = append(s.Names[u.kind], method)
		}
		if u.kind == ServerNotification {
			notes = doc
		}
	}
	items, err := itemTypes(notes)
	if err != nil {
		return nil, fmt.Errorf("loading surface %s: %w", filepath.Join(dir, "ServerNotification.json"), err)
	}
	s.Names[ThreadItem] = items
	return s, nil
}

// itemTypes reads the item types from ServerNotification.json: the tags
// of the union item/started's params.item refers to.
func itemTypes(doc map[string]any) ([]string, error) {
	const note = "item/started"
	var params any
	branches, _ := doc["oneOf"].([]any)
	for _, b := range branches {
		if m, _ := branchMethod(b); m == note {
			props, _ := b.(map[string]any)["properties"].(map[string]any)
			params = props["params"]
		}
	}
	p, err := deref(doc, params)
	if err != nil {
		return nil, fmt.Errorf("%s params: %w", note, err)
	}
	props, _ := p["properties"].(map[string]any)
	item, err := deref(doc, props["item"])
	if err != nil {
		return nil, fmt.Errorf("%s params.item: %w", note, err)
	}
	var out []string
	for i, b := range append(anyList(item["oneOf"]), anyList(item["anyOf"])...) {
		obj, _ := b.(map[string]any)
		bprops, _ := obj["properties"].(map[string]any)
		t, _ := bprops["type"].(map[string]any)
		var tag string
		if enum := anyList(t["enum"]); len(enum) == 1 {
			tag, _ = enum[0].(string)
		} else {
			tag, _ = t["const"].(string)
		}
		if tag == "" {
			return nil, fmt.Errorf("%s params.item: branch %d has no one-value type tag", note, i)
		}
		out = append(out, tag)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s params.item is not a union of item types", note)
	}
	return out, nil
}

// deref resolves a schema that is a local $ref ("#/definitions/X") in doc,
// or returns it as it is.
func deref(doc map[string]any, s any) (map[string]any, error) {
	obj, _ := s.(map[string]any)
	if obj == nil {
		return nil, fmt.Errorf("no schema")
	}
	ref, _ := obj["$ref"].(string)
	if ref == "" {
		return obj, nil
	}
	name, ok := strings.CutPrefix(ref, "#/definitions/")
	if !ok {
		return nil, fmt.Errorf("$ref %q is not a local definition", ref)
	}
	defs, _ := doc["definitions"].(map[string]any)
	def, _ := defs[name].(map[string]any)
	if def == nil {
		return nil, fmt.Errorf("$ref %q: no such definition", ref)
	}
	return def, nil
}

func anyList(v any) []any {
	l, _ := v.([]any)
	return l
}
