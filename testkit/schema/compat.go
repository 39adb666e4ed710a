package schema

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
)

// This file compares two generated bundles (the pinned CLI's and a newer
// one's) for what the daemon uses: additions pass, breaking changes fail.
// What the daemon uses is a list of Use, one per method it calls, reads or
// answers, with the Go types (codexproto's) it writes and reads; the check
// walks each Go type's JSON fields alongside the schema.

// Use is one message the daemon exchanges with the app-server.
type Use struct {
	Kind   Kind
	Method string
	// Sends is a value of the Go type the daemon writes: a client
	// request's or notification's params, or its answer to a server
	// request. nil: no params (or null).
	Sends any
	// Reads are values of the Go types the daemon decodes: a client
	// request's result, or a server notification's or request's params.
	Reads []any
}

// Problem is one way a bundle fails a Use.
type Problem struct {
	Kind   Kind
	Method string
	// Field is the JSON path the problem is at, e.g. "params.turn.status"
	// or "result.thread.id"; "" for the method itself.
	Field string
	What  string
}

func (p Problem) String() string {
	if p.Field == "" {
		return fmt.Sprintf("%s %s: %s", p.Kind, p.Method, p.What)
	}
	return fmt.Sprintf("%s %s: %s: %s", p.Kind, p.Method, p.Field, p.What)
}

// Report is what Compare found.
type Report struct {
	// Breaks are problems of the new bundle that the old one does not
	// have: a removed method, a removed or retyped field the daemon reads
	// or sends, a newly required param, a removed enum value the daemon
	// may send.
	Breaks []Problem
	// Known are problems both bundles have: the daemon's types read a
	// field the schema never had (decoded as its zero value). They are
	// reported, not failed: the pin passed its tests with them.
	Known []Problem
	// Additions are what the new bundle adds and the old lacks: methods
	// and notifications, fields and enum values of what the daemon uses.
	Additions []string
	// Removals are methods the new bundle drops that the daemon does not
	// use.
	Removals []string
}

// Bundle is a generated schema bundle, read for comparison: the params
// schema of every method of the four unions and the result schema of every
// request.
type Bundle struct {
	params  map[Kind]map[string]node
	results map[Kind]map[string]node
}

// node is a schema with the document its local $refs resolve in.
type node struct {
	doc map[string]any
	s   any // a schema object, true, or nil for "no params"
}

// LoadBundle reads the bundle that Generate wrote into dir.
func LoadBundle(dir string) (*Bundle, error) {
	b := &Bundle{params: map[Kind]map[string]node{}, results: map[Kind]map[string]node{ClientRequest: {}, ServerRequest: {}}}
	for _, u := range unions {
		path := filepath.Join(dir, u.file)
		doc, err := readPlainJSON(path)
		if err != nil {
			return nil, fmt.Errorf("loading schema: %w", err)
		}
		branches, _ := doc["oneOf"].([]any)
		if len(branches) == 0 {
			return nil, fmt.Errorf("loading schema %s: root has no oneOf union", path)
		}
		b.params[u.kind] = map[string]node{}
		for i, br := range branches {
			method, paramsRef := branchMethod(br)
			if method == "" {
				return nil, fmt.Errorf("loading schema %s: oneOf/%d has no method enum", path, i)
			}
			props, _ := br.(map[string]any)["properties"].(map[string]any)
			b.params[u.kind][method] = node{doc: doc, s: props["params"]}
			if u.kind != ClientRequest && u.kind != ServerRequest {
				continue
			}
			name := resultName(u.kind, method, paramsRef)
			if name == "" {
				continue
			}
			if rp := resultPath(dir, name, u.kind); rp != "" {
				rdoc, err := readPlainJSON(rp)
				if err != nil {
					return nil, fmt.Errorf("loading schema: %w", err)
				}
				b.results[u.kind][method] = node{doc: rdoc, s: rdoc}
			}
		}
	}
	return b, nil
}

func readPlainJSON(path string) (map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	return doc, nil
}

// Check lists the problems of b for uses.
func (b *Bundle) Check(uses []Use) []Problem {
	out, _ := b.check(uses)
	return out
}

// check lists the problems of b for uses, and the enum values of every
// string field the daemon sends, by "kind method field".
func (b *Bundle) check(uses []Use) ([]Problem, map[string]map[string]bool) {
	var out []Problem
	enums := map[string]map[string]bool{}
	for _, u := range uses {
		c := checker{kind: u.Kind, method: u.Method, enums: enums}
		params, ok := b.params[u.Kind][u.Method]
		if !ok {
			c.add("", "gone from the schema: the daemon uses it")
			out = append(out, c.problems...)
			continue
		}
		switch u.Kind {
		case ClientRequest, ClientNotification:
			if u.Sends != nil {
				c.write("params", params, reflect.TypeOf(u.Sends), 0)
			}
			for _, r := range u.Reads {
				if res, ok := b.results[u.Kind][u.Method]; ok {
					c.read("result", res, reflect.TypeOf(r), 0)
				} else {
					c.add("result", "no result schema: the daemon reads the result")
				}
			}
		case ServerNotification, ServerRequest:
			for _, r := range u.Reads {
				c.read("params", params, reflect.TypeOf(r), 0)
			}
			if u.Sends != nil {
				if res, ok := b.results[u.Kind][u.Method]; ok {
					c.write("result", res, reflect.TypeOf(u.Sends), 0)
				} else {
					c.add("result", "no result schema: the daemon answers it")
				}
			}
		}
		out = append(out, c.problems...)
	}
	return out, enums
}

// Compare checks what changed from old to newer for uses.
func Compare(old, newer *Bundle, uses []Use) Report {
	var r Report
	before := map[Problem]bool{}
	oldProblems, oldEnums := old.check(uses)
	for _, p := range oldProblems {
		before[p] = true
	}
	newProblems, newEnums := newer.check(uses)
	for _, p := range newProblems {
		if before[p] {
			r.Known = append(r.Known, p)
		} else {
			r.Breaks = append(r.Breaks, p)
		}
	}
	// An enum value gone from a field the daemon sends: it may send it.
	for _, key := range sortedNames(oldEnums) {
		now, ok := newEnums[key]
		if !ok {
			continue // the field itself is gone: a break above
		}
		for _, v := range sortedNames(oldEnums[key]) {
			if !now[v] {
				k, rest, _ := strings.Cut(key, "\x00")
				method, field, _ := strings.Cut(rest, "\x00")
				r.Breaks = append(r.Breaks, Problem{Kind: Kind(k), Method: method, Field: field,
					What: fmt.Sprintf("value %q gone: the daemon may send it", v)})
			}
		}
	}
	used := map[Kind]map[string]bool{}
	for _, u := range uses {
		if used[u.Kind] == nil {
			used[u.Kind] = map[string]bool{}
		}
		used[u.Kind][u.Method] = true
	}
	for _, un := range unions {
		for m := range newer.params[un.kind] {
			if _, ok := old.params[un.kind][m]; !ok {
				r.Additions = append(r.Additions, fmt.Sprintf("%s %s: new", un.kind, m))
			}
		}
		for m := range old.params[un.kind] {
			if _, ok := newer.params[un.kind][m]; !ok && !used[un.kind][m] {
				r.Removals = append(r.Removals, fmt.Sprintf("%s %s: removed (the daemon does not use it)", un.kind, m))
			}
		}
	}
	// Fields and enum values added to what the daemon uses.
	for _, u := range uses {
		for _, side := range []struct {
			name       string
			old, newer map[Kind]map[string]node
		}{{"params", old.params, newer.params}, {"result", old.results, newer.results}} {
			o, ok1 := side.old[u.Kind][u.Method]
			n, ok2 := side.newer[u.Kind][u.Method]
			if ok1 && ok2 {
				added, removed := changes(side.name, o, n, 0)
				for _, a := range added {
					r.Additions = append(r.Additions, fmt.Sprintf("%s %s: %s", u.Kind, u.Method, a))
				}
				for _, a := range removed {
					r.Removals = append(r.Removals, fmt.Sprintf("%s %s: %s", u.Kind, u.Method, a))
				}
			}
		}
	}
	sort.Strings(r.Additions)
	sort.Strings(r.Removals)
	return r
}

// changes lists the properties and enum values n adds to o, and the
// ones it drops, down the properties both have. What the daemon uses of
// the dropped ones Check reports as breaks; the rest is for the reader.
func changes(path string, o, n node, depth int) (added, removed []string) {
	if depth > 8 {
		return nil, nil
	}
	op, np := properties(o), properties(n)
	for _, name := range sortedNames(np) {
		if _, ok := op[name]; !ok {
			added = append(added, fmt.Sprintf("%s.%s: new field", path, name))
			continue
		}
		a, r := changes(path+"."+name, op[name], np[name], depth+1)
		added, removed = append(added, a...), append(removed, r...)
	}
	for _, name := range sortedNames(op) {
		if _, ok := np[name]; !ok {
			removed = append(removed, fmt.Sprintf("%s.%s: field removed", path, name))
		}
	}
	oe, ne := enumValues(o), enumValues(n)
	for _, v := range sortedNames(ne) {
		if len(oe) > 0 && !oe[v] {
			added = append(added, fmt.Sprintf("%s: new value %q", path, v))
		}
	}
	for _, v := range sortedNames(oe) {
		if len(ne) > 0 && !ne[v] {
			removed = append(removed, fmt.Sprintf("%s: value %q removed", path, v))
		}
	}
	return added, removed
}

// checker walks one Use and collects its problems.
type checker struct {
	kind     Kind
	method   string
	problems []Problem
	enums    map[string]map[string]bool
}

func (c *checker) add(field, what string) {
	c.problems = append(c.problems, Problem{Kind: c.kind, Method: c.method, Field: field, What: what})
}

var rawMessage = reflect.TypeOf(json.RawMessage(nil))

// jsonTypes are the JSON types a Go type encodes to or decodes from; nil
// means any.
func jsonTypes(t reflect.Type) map[string]bool {
	if t == rawMessage {
		return nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		ts := jsonTypes(t.Elem())
		if ts != nil {
			ts["null"] = true
		}
		return ts
	case reflect.Interface:
		return nil
	case reflect.String:
		return map[string]bool{"string": true}
	case reflect.Bool:
		return map[string]bool{"boolean": true}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]bool{"integer": true}
	case reflect.Float32, reflect.Float64:
		return map[string]bool{"integer": true, "number": true}
	case reflect.Struct, reflect.Map:
		return map[string]bool{"object": true}
	case reflect.Slice, reflect.Array:
		return map[string]bool{"array": true}
	}
	return nil
}

// field is one JSON field of a Go struct.
type field struct {
	name      string
	t         reflect.Type
	omitempty bool
}

// fields lists t's JSON fields as encoding/json sees them: embedded
// structs' fields promoted, the shallower field winning.
func fields(t reflect.Type) []field {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var out []field
	seen := map[string]bool{}
	var deeper []reflect.Type
	walk := func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" || (!f.IsExported() && !f.Anonymous) {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
				deeper = append(deeper, f.Type)
				continue
			}
			if name == "" {
				name = f.Name
			}
			if seen[name] {
				continue
			}
			seen[name] = true
			out = append(out, field{name: name, t: f.Type, omitempty: strings.Contains(opts, "omitempty")})
		}
	}
	walk(t)
	for len(deeper) > 0 { // embedded structs, shallowest first
		next := deeper
		deeper = nil
		for _, d := range next {
			walk(d)
		}
	}
	return out
}

// read checks that what the daemon decodes into t is still there with a
// type it can decode.
func (c *checker) read(path string, n node, t reflect.Type, depth int) {
	if depth > 12 || n.s == nil {
		return
	}
	if want := jsonTypes(t); want != nil {
		got := schemaTypes(n)
		for typ := range got {
			if typ != "null" && !want[typ] && !(typ == "integer" && want["number"]) {
				c.add(path, fmt.Sprintf("the schema allows %s, the daemon decodes %s", sortedList(got), t))
				return
			}
		}
	}
	switch t.Kind() {
	case reflect.Pointer:
		c.read(path, n, t.Elem(), depth+1)
		return
	case reflect.Slice, reflect.Array, reflect.Map:
		if t != rawMessage {
			if item, ok := inner(n, t); ok {
				c.read(path+"[]", item, t.Elem(), depth+1)
			}
		}
		return
	}
	props := properties(n)
	if props == nil {
		return // free-form, or a type that is not an object
	}
	for _, f := range fields(t) {
		p, ok := props[f.name]
		if !ok {
			c.add(path+"."+f.name, "gone: the daemon reads it")
			continue
		}
		c.read(path+"."+f.name, p, f.t, depth+1)
	}
}

// write checks that what the daemon encodes from t is still accepted:
// every field it sends exists with its type and its enum values, and
// every required field is one it sends.
func (c *checker) write(path string, n node, t reflect.Type, depth int) {
	if depth > 12 || n.s == nil {
		return
	}
	if have := jsonTypes(t); have != nil {
		got := schemaTypes(n)
		if got != nil {
			ok := false
			for typ := range have {
				if typ != "null" && (got[typ] || (typ == "integer" && got["number"])) {
					ok = true
				}
			}
			if !ok {
				c.add(path, fmt.Sprintf("the schema wants %s, the daemon sends %s", sortedList(got), t))
				return
			}
		}
	}
	switch t.Kind() {
	case reflect.Pointer:
		c.write(path, n, t.Elem(), depth+1)
		return
	case reflect.Slice, reflect.Array, reflect.Map:
		if t != rawMessage {
			if item, ok := inner(n, t); ok {
				c.write(path+"[]", item, t.Elem(), depth+1)
			}
		}
		return
	case reflect.String:
		if vals := enumValues(n); len(vals) > 0 {
			c.enums[string(c.kind)+"\x00"+c.method+"\x00"+path] = vals
		}
		return
	}
	props := properties(n)
	if props == nil {
		return
	}
	sent := map[string]field{}
	for _, f := range fields(t) {
		sent[f.name] = f
		p, ok := props[f.name]
		if !ok {
			c.add(path+"."+f.name, "gone: the daemon sends it")
			continue
		}
		c.write(path+"."+f.name, p, f.t, depth+1)
	}
	for _, r := range required(n) {
		f, ok := sent[r]
		switch {
		case !ok:
			c.add(path+"."+r, "required, and the daemon does not send it")
		case f.omitempty:
			c.add(path+"."+r, "required, and the daemon leaves it out when empty")
		}
	}
}

// resolve follows $ref within n's document.
func resolve(n node) node {
	for range 32 {
		m, ok := n.s.(map[string]any)
		if !ok {
			return n
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return n
		}
		target := any(n.doc)
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			obj, _ := target.(map[string]any)
			target = obj[part]
		}
		n = node{doc: n.doc, s: target}
	}
	return n
}

// variants are n and the schemas it combines (allOf, anyOf, oneOf),
// resolved, flattened.
func variants(n node) []node {
	n = resolve(n)
	out := []node{n}
	m, ok := n.s.(map[string]any)
	if !ok {
		return out
	}
	for _, k := range []string{"allOf", "anyOf", "oneOf"} {
		list, _ := m[k].([]any)
		for _, s := range list {
			out = append(out, variants(node{doc: n.doc, s: s})...)
		}
	}
	return out
}

// schemaTypes are the JSON types n allows; nil means any.
func schemaTypes(n node) map[string]bool {
	out := map[string]bool{}
	typed := false
	for _, v := range variants(n) {
		m, ok := v.s.(map[string]any)
		if !ok {
			continue
		}
		switch t := m["type"].(type) {
		case string:
			out[t], typed = true, true
		case []any:
			for _, x := range t {
				if s, ok := x.(string); ok {
					out[s], typed = true, true
				}
			}
		}
		vals, _ := m["enum"].([]any)
		if c, ok := m["const"]; ok {
			vals = append(vals, c)
		}
		for _, x := range vals {
			typed = true
			switch x.(type) {
			case string:
				out["string"] = true
			case bool:
				out["boolean"] = true
			case float64:
				out["number"] = true
			case nil:
				out["null"] = true
			}
		}
		if _, ok := m["properties"]; ok {
			out["object"], typed = true, true
		}
	}
	// A union with a free-form branch allows anything.
	for _, v := range variants(n)[1:] {
		if m, ok := v.s.(map[string]any); (ok && m["type"] == nil && m["enum"] == nil && m["const"] == nil && m["properties"] == nil &&
			m["$ref"] == nil && m["allOf"] == nil && m["anyOf"] == nil && m["oneOf"] == nil) || v.s == true {
			return nil
		}
	}
	if !typed {
		return nil
	}
	return out
}

// properties are the properties of n and of every variant of it, or nil
// when n describes no object properties.
func properties(n node) map[string]node {
	var out map[string]node
	for _, v := range variants(n) {
		m, ok := v.s.(map[string]any)
		if !ok {
			continue
		}
		props, ok := m["properties"].(map[string]any)
		if ok && out == nil {
			out = map[string]node{} // an object that declares its fields, maybe none
		}
		for name, s := range props {
			if _, dup := out[name]; !dup {
				out[name] = node{doc: v.doc, s: s}
			}
		}
	}
	return out
}

// required are the properties every variant of n requires: those of n
// and its allOf, plus those all of a oneOf's or anyOf's branches share.
func required(n node) []string {
	n = resolve(n)
	m, ok := n.s.(map[string]any)
	if !ok {
		return nil
	}
	set := map[string]bool{}
	for _, r := range asStrings(m["required"]) {
		set[r] = true
	}
	if all, _ := m["allOf"].([]any); len(all) > 0 {
		for _, s := range all {
			for _, r := range required(node{doc: n.doc, s: s}) {
				set[r] = true
			}
		}
	}
	for _, k := range []string{"oneOf", "anyOf"} {
		list, _ := m[k].([]any)
		var common map[string]bool
		for _, s := range list {
			rs := map[string]bool{}
			for _, r := range required(node{doc: n.doc, s: s}) {
				rs[r] = true
			}
			if common == nil {
				common = rs
				continue
			}
			for r := range common {
				if !rs[r] {
					delete(common, r)
				}
			}
		}
		for r := range common {
			set[r] = true
		}
	}
	return sortedNames(set)
}

// inner is the schema of an array's items or an object's values
// (additionalProperties), for the Go container t.
func inner(n node, t reflect.Type) (node, bool) {
	key := "items"
	if t.Kind() == reflect.Map {
		key = "additionalProperties"
	}
	for _, v := range variants(n) {
		if m, ok := v.s.(map[string]any); ok {
			if s, ok := m[key].(map[string]any); ok {
				return node{doc: v.doc, s: s}, true
			}
		}
	}
	return node{}, false
}

func enumValues(n node) map[string]bool {
	out := map[string]bool{}
	for _, v := range variants(n) {
		m, ok := v.s.(map[string]any)
		if !ok {
			continue
		}
		vals, _ := m["enum"].([]any)
		if c, ok := m["const"]; ok {
			vals = append(vals, c)
		}
		for _, x := range vals {
			if s, ok := x.(string); ok {
				out[s] = true
			}
		}
	}
	return out
}

func asStrings(v any) []string {
	list, _ := v.([]any)
	var out []string
	for _, x := range list {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedList(m map[string]bool) string {
	return strings.Join(sortedNames(m), "|")
}
