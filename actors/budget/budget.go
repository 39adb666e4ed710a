// Package budget holds the operator's token budgets of the users: a
// default, overrides per user and per group, the rolling window they are
// counted in and what counts. Rules are plain values; a Holder keeps the
// current ones for the actors, which read them at every check, so that a
// reload (SIGHUP) applies to the live users at once.
package budget

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultWindow is the rolling window of a budget when none is set.
const DefaultWindow = 24 * time.Hour

// Rules are the token budgets of a node's users.
type Rules struct {
	// Tokens is each user's budget in a Window: 0 is no budget.
	Tokens int64
	// Window is the rolling window the spend is counted in: spend older
	// than it no longer counts (DefaultWindow when 0).
	Window time.Duration
	// CachedInput says cached input tokens count against the budget (they
	// are part of the input as the API reports it); without it, only the
	// input that was not cached, and the output, count.
	CachedInput bool
	// Overrun is how far past its budget a running turn may go before it
	// is interrupted (0: a turn is interrupted once a report of its puts
	// the user at the budget).
	Overrun int64
	// Users and Groups override Tokens: a user's own entry first, else the
	// smallest budget of the groups the user is in.
	Users  map[string]int64
	Groups []Group
}

// Group is a budget shared as a rule (each member has it, not the group
// as a whole).
type Group struct {
	Name    string   `json:"-"`
	Tokens  int64    `json:"tokens"`
	Members []string `json:"members"`
}

// Of is user's budget under r: 0 for none.
func (r *Rules) Of(user string) int64 {
	if r == nil {
		return 0
	}
	if t, ok := r.Users[user]; ok {
		return t
	}
	found, least := false, int64(0)
	for _, g := range r.Groups {
		if slices.Contains(g.Members, user) && (!found || g.Tokens < least) {
			found, least = true, g.Tokens
		}
	}
	if found {
		return least
	}
	return r.Tokens
}

// WindowOr is r's window, DefaultWindow when unset.
func (r *Rules) WindowOr() time.Duration {
	if r == nil || r.Window <= 0 {
		return DefaultWindow
	}
	return r.Window
}

// Any reports whether any user has a budget under r.
func (r *Rules) Any() bool {
	if r == nil {
		return false
	}
	if r.Tokens > 0 {
		return true
	}
	for _, t := range r.Users {
		if t > 0 {
			return true
		}
	}
	for _, g := range r.Groups {
		if g.Tokens > 0 {
			return true
		}
	}
	return false
}

// Holder keeps the current rules; safe for concurrent use. The zero value
// holds no budget.
type Holder struct{ p atomic.Pointer[Rules] }

// NewHolder holds r.
func NewHolder(r Rules) *Holder {
	h := &Holder{}
	h.Set(r)
	return h
}

// Rules are the current rules (nil: none). They must not be changed.
func (h *Holder) Rules() *Rules {
	if h == nil {
		return nil
	}
	return h.p.Load()
}

// Set replaces the rules.
func (h *Holder) Set(r Rules) { h.p.Store(&r) }

// maxFileBytes bounds a budgets file.
const maxFileBytes = 4 << 20

// file is the budgets file's format.
type file struct {
	Users  map[string]int64 `json:"users"`
	Groups map[string]Group `json:"groups"`
}

// ReadFile reads the overrides of a budgets file (JSON):
//
//	{"users": {"alice": 2000000},
//	 "groups": {"interns": {"tokens": 500000, "members": ["bob", "carol"]}}}
//
// into r's Users and Groups. Unknown fields, groups without members
// and negative budgets are errors naming the file.
func ReadFile(path string, r *Rules) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading the budgets file: %w", err)
	}
	if len(data) > maxFileBytes {
		return fmt.Errorf("the budgets file %s is over %d bytes", path, maxFileBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f file
	if err := dec.Decode(&f); err != nil {
		return fmt.Errorf("the budgets file %s: %w", path, err)
	}
	if dec.More() {
		return fmt.Errorf("the budgets file %s: data after the object", path)
	}
	var errs []error
	for u, t := range f.Users {
		if t < 0 {
			errs = append(errs, fmt.Errorf("user %q: a negative budget", u))
		}
	}
	r.Users, r.Groups = f.Users, nil
	for name, g := range f.Groups {
		if g.Tokens < 0 {
			errs = append(errs, fmt.Errorf("group %q: a negative budget", name))
		}
		if len(g.Members) == 0 {
			errs = append(errs, fmt.Errorf("group %q: no members", name))
		}
		g.Name = name
		r.Groups = append(r.Groups, g)
	}
	slices.SortFunc(r.Groups, func(a, b Group) int { return strings.Compare(a.Name, b.Name) })
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("the budgets file %s: %w", path, err)
	}
	return nil
}
