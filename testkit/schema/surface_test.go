package schema_test

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/meshweaver/supervisor/testkit/schema"
)

var surfaces struct {
	sync.Mutex
	m map[string]*schema.Surface
}

// surface generates and reads bin's experimental surface once per test
// process (about half a second).
func surface(t *testing.T, bin string) *schema.Surface {
	t.Helper()
	surfaces.Lock()
	defer surfaces.Unlock()
	if s := surfaces.m[bin]; s != nil {
		return s
	}
	s, err := schema.BuildSurface(bin)
	if err != nil {
		t.Fatal(err)
	}
	if surfaces.m == nil {
		surfaces.m = map[string]*schema.Surface{}
	}
	surfaces.m[bin] = s
	return s
}

func pinnedSurface(t *testing.T) *schema.Surface {
	t.Helper()
	bin, err := schema.FindCLI()
	if err != nil {
		t.Fatal(err)
	}
	return surface(t, bin)
}

// TestSurfaceExperimental: the surface holds every method of the stable
// bundle the Validator checks lines against, and the experimental ones
// besides (the daemon initializes with experimentalApi).
func TestSurfaceExperimental(t *testing.T) {
	s := pinnedSurface(t)
	version := s.Version
	v := schema.ForTest(t)
	for _, k := range []schema.Kind{schema.ClientRequest, schema.ClientNotification, schema.ServerRequest, schema.ServerNotification} {
		for _, m := range v.Methods(k) {
			if !s.Has(k, m) {
				t.Errorf("codex %s: the stable bundle has %s %s, the experimental surface does not", version, k, m)
			}
		}
	}
	if stable, all := len(v.Methods(schema.ClientRequest)), len(s.Names[schema.ClientRequest]); all <= stable {
		t.Errorf("codex %s: %d client requests with --experimental, %d without: want more with", version, all, stable)
	}
}

// TestLoadSurfaceItemTypes: the item types come from item/started's
// params.item; a bundle without them is an error, not an empty list.
func TestLoadSurfaceItemTypes(t *testing.T) {
	dir := t.TempDir()
	union := func(file string, methods ...string) map[string]any {
		var branches []any
		for _, m := range methods {
			branches = append(branches, map[string]any{"properties": map[string]any{
				"method": map[string]any{"enum": []any{m}},
				"params": map[string]any{"$ref": "#/definitions/P"},
			}})
		}
		return map[string]any{"oneOf": branches, "definitions": map[string]any{}}
	}
	writeJSON(t, dir+"/ClientRequest.json", union("ClientRequest.json", "a/b"))
	writeJSON(t, dir+"/ClientNotification.json", union("ClientNotification.json", "initialized"))
	writeJSON(t, dir+"/ServerRequest.json", union("ServerRequest.json", "c/d"))
	notes := union("ServerNotification.json", "item/started", "e")
	notes["definitions"] = map[string]any{
		"P": map[string]any{"properties": map[string]any{"item": map[string]any{"$ref": "#/definitions/ThreadItem"}}},
		"ThreadItem": map[string]any{"oneOf": []any{
			map[string]any{"properties": map[string]any{"type": map[string]any{"enum": []any{"agentMessage"}}}},
			map[string]any{"properties": map[string]any{"type": map[string]any{"const": "plan"}}},
		}},
	}
	writeJSON(t, dir+"/ServerNotification.json", notes)
	s, err := schema.LoadSurface(dir)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[schema.Kind][]string{
		schema.ClientRequest: {"a/b"}, schema.ClientNotification: {"initialized"}, schema.ServerRequest: {"c/d"},
		schema.ServerNotification: {"item/started", "e"}, schema.ThreadItem: {"agentMessage", "plan"},
	} {
		if !slices.Equal(s.Names[k], want) {
			t.Errorf("%s: %q, want %q", k, s.Names[k], want)
		}
	}
	delete(notes["definitions"].(map[string]any), "ThreadItem")
	writeJSON(t, dir+"/ServerNotification.json", notes)
	if _, err := schema.LoadSurface(dir); err == nil || !strings.Contains(err.Error(), "ThreadItem") {
		t.Errorf("LoadSurface without ThreadItem: %v, want an error naming it", err)
	}
}
