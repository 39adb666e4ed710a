package edge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/third_party/hollywood/remote"
)

// Kind is a class of messages a peer may be allowed to send.
type Kind string

// The kinds of the authorization file.
const (
	KindRounds  Kind = "rounds"  // StartRound, AttachRound, DetachRound, WarmUp, ArchiveThread, ForkThread, CompactThread
	KindControl Kind = "control" // InterruptRound, SteerRound, AnswerRequest, UsageRequest
	KindLogin   Kind = "login"   // StartLogin, CancelLogin, SetAPIKey, Logout
	KindAccount Kind = "account" // AccountRequest, ModelsRequest, RateLimitsRequest, ListThreads, ReadThread
	// KindTools: the identity serves dynamic tools of the user's rounds
	// (ToolCallResult).
	KindTools Kind = "tools"
	// KindCluster: the identity is a member of this daemon's cluster; the
	// owners of users answer its relays (a grant with users ["*"]).
	KindCluster Kind = "cluster"
)

var kinds = []Kind{KindRounds, KindControl, KindLogin, KindAccount, KindTools, KindCluster}

// KindOf is the kind of a decoded command and the user it acts for; ok is
// false for anything the daemon does not accept from a peer.
func KindOf(msg any) (k Kind, user string, ok bool) {
	switch m := msg.(type) {
	case messages.StartRound:
		return KindRounds, m.User, true
	case messages.WarmUp:
		return KindRounds, m.User, true
	case messages.InterruptRound:
		return KindControl, m.User, true
	case messages.SteerRound:
		return KindControl, m.User, true
	case messages.AnswerRequest:
		return KindControl, m.User, true
	case messages.ToolCallResult:
		return KindTools, m.User, true
	case messages.CodexRequest:
		if slices.Contains(messages.CodexControls, m.Method) {
			return KindControl, m.User, true
		}
		return KindAccount, m.User, true
	case messages.AttachRound:
		return KindRounds, m.User, true
	case messages.DetachRound:
		return KindRounds, m.User, true
	case messages.StartLogin:
		return KindLogin, m.User, true
	case messages.CancelLogin:
		return KindLogin, m.User, true
	case messages.SetAPIKey:
		return KindLogin, m.User, true
	case messages.Logout:
		return KindLogin, m.User, true
	case messages.AccountRequest:
		return KindAccount, m.User, true
	case messages.ModelsRequest:
		return KindAccount, m.User, true
	case messages.RateLimitsRequest:
		return KindAccount, m.User, true
	case messages.UsageRequest:
		return KindControl, m.User, true
	case messages.ListThreads:
		return KindAccount, m.User, true
	case messages.ReadThread:
		return KindAccount, m.User, true
	case messages.ArchiveThread:
		return KindRounds, m.User, true
	case messages.ForkThread:
		return KindRounds, m.User, true
	case messages.CompactThread:
		return KindRounds, m.User, true
	}
	return "", "", false
}

// PolicyVersion is the version of the authorization file this daemon reads.
const PolicyVersion = 1

// Policy is the authorization file: which peer identities may send which
// kinds of messages for which users. Nothing is allowed that no grant
// allows. The shape follows etcd's certificate-to-user mapping and NATS
// accounts: the certificate names the peer, the file gives it rights.
//
//	{
//	  "version": 1,
//	  "grants": [
//	    {"identities": ["spiffe://mesh/chat-gateway"], "users": ["*"], "kinds": ["rounds", "control"]},
//	    {"identities": ["spiffe://mesh/agent-*"], "users": ["team-*"], "kinds": ["rounds", "control", "account"]},
//	    {"identities": ["ops-console"], "users": ["*"], "kinds": ["login", "account"]}
//	  ]
//	}
//
// Patterns are [path.Match] globs: "*" matches any run of characters except
// "/", "?" one such character, "[a-z]" a class. A pattern that is exactly
// "*" matches everything, "/" included.
type Policy struct {
	Version int     `json:"version"`
	Grants  []Grant `json:"grants"`
}

// Grant gives every identity matching one of Identities the Kinds for every
// user matching one of Users.
type Grant struct {
	Identities []string `json:"identities"`
	Users      []string `json:"users"`
	Kinds      []Kind   `json:"kinds"`
}

// LoadPolicy reads and checks the authorization file at name.
func LoadPolicy(name string) (*Policy, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("reading the authorization file: %w", err)
	}
	p, err := ParsePolicy(b)
	if err != nil {
		return nil, fmt.Errorf("authorization file %s: %w", name, err)
	}
	return p, nil
}

// ParsePolicy decodes an authorization file strictly: unknown fields,
// trailing data, an unknown version, kind or a bad pattern are errors that
// name the line, the grant and the field.
func ParsePolicy(b []byte) (*Policy, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var p Policy
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("line %d: %w", lineAt(b, errOffset(b, dec.InputOffset(), err)), jsonErr(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("line %d: data after the top-level object", lineAt(b, dec.InputOffset()))
	}
	if p.Version != PolicyVersion {
		return nil, fmt.Errorf("version %d: this daemon reads version %d", p.Version, PolicyVersion)
	}
	var errs []error
	for i, g := range p.Grants {
		where := fmt.Sprintf("grants[%d]", i)
		if len(g.Identities) == 0 || len(g.Users) == 0 || len(g.Kinds) == 0 {
			errs = append(errs, fmt.Errorf("%s: identities, users and kinds must each list at least one entry", where))
		}
		for _, pat := range append(append([]string{}, g.Identities...), g.Users...) {
			if _, err := path.Match(pat, ""); err != nil || pat == "" {
				errs = append(errs, fmt.Errorf("%s: bad pattern %q", where, pat))
			}
		}
		for _, k := range g.Kinds {
			if !validKind(k) {
				errs = append(errs, fmt.Errorf("%s.kinds: unknown kind %q (kinds: rounds, control, login, account, cluster)", where, k))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &p, nil
}

func validKind(k Kind) bool {
	for _, v := range kinds {
		if k == v {
			return true
		}
	}
	return false
}

// jsonErr names the field of a type mismatch; the decoder's own text
// already names an unknown field.
func jsonErr(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("field %q: %s is not a %s", te.Field, te.Value, te.Type)
	}
	return err
}

// errOffset is where in b the decode error err lies: the syntax error's
// offset, the last mention of an unknown field before off, else off.
func errOffset(b []byte, off int64, err error) int64 {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return se.Offset
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if i := bytes.LastIndex(b[:min(max(off, 0), int64(len(b)))], []byte(name)); i >= 0 {
			return int64(i)
		}
	}
	return off
}

func lineAt(b []byte, off int64) int {
	off = min(max(off, 0), int64(len(b)))
	return 1 + bytes.Count(b[:off], []byte("\n"))
}

// Allows reports whether identity may send messages of kind k for user.
// A nil policy allows everything (plaintext on loopback, or
// --authz-allow-any).
func (p *Policy) Allows(identity, user string, k Kind) bool {
	if p == nil {
		return true
	}
	for _, g := range p.Grants {
		if matchIdentity(g.Identities, identity) && matchAny(g.Users, user) && hasKind(g.Kinds, k) {
			return true
		}
	}
	return false
}

// Names reports whether some grant names identity at all: a certificate
// whose identity has none is refused at the TLS handshake, before it can
// hold a connection's buffers. A nil policy grants every identity.
func (p *Policy) Names(identity string) bool {
	if p == nil {
		return true
	}
	for _, g := range p.Grants {
		if matchIdentity(g.Identities, identity) {
			return true
		}
	}
	return false
}

// Typed is an identity, or an identity pattern of the file, with its kind:
// "uri:<URI>" for a certificate's URI SAN, "cn:<CN>" for its Subject CN,
// as remote.DefaultIdentify names peers. A name without a kind takes the
// one it spells: with "://" a URI, else a CN; so the patterns of earlier
// files ("spiffe://mesh/gateway", "alice-app") keep their meaning, and a
// CN that spells a URI can no longer match them as a URI. "*" stays "*"
// (every identity), "" stays "" (none).
func Typed(s string) string { return remote.TypedIdentity(s) }

// matchIdentity reports whether the identity matches one of patterns,
// both typed.
func matchIdentity(patterns []string, identity string) bool {
	identity = Typed(identity)
	for _, p := range patterns {
		if Match(Typed(p), identity) {
			return true
		}
	}
	return false
}

// Match reports whether name matches one pattern of the file.
func Match(pattern, name string) bool {
	if pattern == "*" {
		return true
	}
	ok, err := path.Match(pattern, name)
	return err == nil && ok
}

func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if Match(p, name) {
			return true
		}
	}
	return false
}

func hasKind(ks []Kind, k Kind) bool {
	for _, v := range ks {
		if v == k {
			return true
		}
	}
	return false
}

// IsReply reports whether msg is one of the daemon's answers (a round's
// events and verdict, a refusal, an account or login answer): what an
// owner sends back to another member's relay.
func IsReply(msg any) bool {
	switch msg.(type) {
	case messages.RoundEvent, messages.RoundFinished, messages.Rejected, messages.RoundControlled,
		messages.LoginChallenge, messages.LoginFinished, messages.APIKeyStored, messages.LoggedOut,
		messages.AccountResponse, messages.ModelsResponse, messages.RateLimitsResponse, messages.UsageResponse:
		return true
	}
	return false
}
