package messages

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/types/known/anypb"
)

// TypeURLPrefix starts the TypeUrl of every envelope; the versioned name
// follows it, as in "meshweaver/start_round.v1".
const TypeURLPrefix = "meshweaver/"

// MaxBodySize is the largest msgpack body, in bytes, that [Encode] produces
// and [Decode] accepts.
const MaxBodySize = 16 << 20

// Sentinel errors. Errors returned by this package wrap one of them, name
// the message type and never contain body bytes, tokens or keys.
var (
	// ErrUnknownType reports a TypeUrl, or a Go type, that is not in the
	// catalog.
	ErrUnknownType = errors.New("unknown message type")
	// ErrMalformed reports an envelope whose body cannot be decoded into its
	// type: nil, too large, not well-formed msgpack, or of the wrong shape.
	ErrMalformed = errors.New("malformed message")
	// ErrInvalid reports a decoded message that fails its Validate method.
	ErrInvalid = errors.New("invalid message")
)

// maxNameInError bounds how much of an untrusted type name is quoted in an
// error or a Rejected reply.
const maxNameInError = 128

// entry is one row of the catalog: a versioned name and its Go type.
type entry struct {
	name   string // versioned name, e.g. "start_round.v1"
	url    string // TypeURLPrefix + name
	typ    reflect.Type
	decode func(body []byte) (any, error) // returns a value of typ
}

// registry maps versioned names (through the full TypeUrl) and Go types to
// entries. It is built once by buildCatalog and never modified afterwards.
//
// To migrate a message to an incompatible shape, add the new type under a
// new ".vN" name and keep the old name as a decode-only entry (in byURL, not
// in byType) whose decode function converts the old shape to the new type,
// until no peer sends the old name any more.
type registry struct {
	byURL  map[string]*entry
	byType map[reflect.Type]*entry
	names  []string // in registration order
}

// catalog is the immutable table of every message the daemon exchanges.
var catalog = buildCatalog()

func buildCatalog() *registry {
	r := &registry{byURL: map[string]*entry{}, byType: map[reflect.Type]*entry{}}
	// Rounds.
	register[StartRound](r, "start_round.v1")
	register[RoundEvent](r, "round_event.v1")
	register[RoundFinished](r, "round_finished.v1")
	register[InterruptRound](r, "interrupt_round.v1")
	register[SteerRound](r, "steer_round.v1")
	register[RoundControlled](r, "round_controlled.v1")
	register[AttachRound](r, "attach_round.v1")
	register[DetachRound](r, "detach_round.v1")
	register[AnswerRequest](r, "answer_request.v1")
	register[ToolCallRequest](r, "tool_call_request.v1")
	register[CodexRequest](r, "codex_request.v1")
	register[CodexResponse](r, "codex_response.v1")
	register[ToolCallResult](r, "tool_call_result.v1")
	register[WarmUp](r, "warm_up.v1")
	register[WarmedUp](r, "warmed_up.v1")
	// Login and credentials.
	register[StartLogin](r, "start_login.v1")
	register[LoginChallenge](r, "login_challenge.v1")
	register[LoginFinished](r, "login_finished.v1")
	register[CancelLogin](r, "cancel_login.v1")
	register[SetAPIKey](r, "set_api_key.v1")
	register[APIKeyStored](r, "api_key_stored.v1")
	register[Logout](r, "logout.v1")
	register[LoggedOut](r, "logged_out.v1")
	// Queries.
	register[AccountRequest](r, "account_request.v1")
	register[AccountResponse](r, "account_response.v1")
	register[ModelsRequest](r, "models_request.v1")
	register[ModelsResponse](r, "models_response.v1")
	register[RateLimitsRequest](r, "rate_limits_request.v1")
	register[RateLimitsResponse](r, "rate_limits_response.v1")
	register[UsageRequest](r, "usage_request.v1")
	register[UsageResponse](r, "usage_response.v1")
	// Threads (messages/threads.go).
	registerThreads(r)
	// Errors.
	register[Rejected](r, "rejected.v1")
	return r
}

// register adds T under name. A duplicate name or type is a programming
// error, so it panics while the package initializes.
func register[T any](r *registry, name string) {
	typ := reflect.TypeFor[T]()
	url := TypeURLPrefix + name
	if _, dup := r.byURL[url]; dup {
		panic("messages: duplicate name " + name)
	}
	if _, dup := r.byType[typ]; dup {
		panic("messages: duplicate type " + typ.String())
	}
	e := &entry{name: name, url: url, typ: typ, decode: decodeAs[T]}
	r.byURL[url] = e
	r.byType[typ] = e
	r.names = append(r.names, name)
}

// decodeAs unmarshals body into a fresh T and returns it as a value.
func decodeAs[T any](body []byte) (any, error) {
	var v T
	if err := msgpack.Unmarshal(body, &v); err != nil {
		return nil, err
	}
	return v, nil
}

// Name returns the versioned wire name of v, such as "start_round.v1", and
// whether v's type is in the catalog. Messages are values: a pointer to a
// message is not registered.
func Name(v any) (string, bool) {
	e, ok := catalog.byType[reflect.TypeOf(v)]
	if !ok {
		return "", false
	}
	return e.name, true
}

// Encode wraps the message v, which must be a value (not a pointer) of a
// registered type, in an envelope ready to send to a remote PID. It fails
// with [ErrUnknownType] for an unregistered type and with [ErrMalformed] if
// the body would exceed the limits that [Decode] enforces.
func Encode(v any) (*anypb.Any, error) {
	typ := reflect.TypeOf(v)
	e, ok := catalog.byType[typ]
	if !ok {
		if typ != nil && typ.Kind() == reflect.Pointer {
			if _, ok := catalog.byType[typ.Elem()]; ok {
				return nil, fmt.Errorf("encoding %s: %w (send the value, not a pointer)", typ, ErrUnknownType)
			}
		}
		return nil, fmt.Errorf("encoding %v: %w", typ, ErrUnknownType)
	}
	body, err := msgpack.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", e.name, err)
	}
	// Checking our own output keeps Encode and Decode symmetric: whatever is
	// sent is accepted by a peer running the same version.
	if n := len(body); n > MaxBodySize {
		return nil, fmt.Errorf("encoding %s: %w: body is %d bytes, max %d", e.name, ErrMalformed, n, MaxBodySize)
	}
	if err := checkBody(body); err != nil {
		return nil, fmt.Errorf("encoding %s: %w: %v", e.name, ErrMalformed, err)
	}
	return &anypb.Any{TypeUrl: e.url, Value: body}, nil
}

// Decode returns the message carried by the envelope a, as a value of its
// registered type (for example StartRound, not *StartRound). It fails with
// [ErrUnknownType] if a.TypeUrl is not in the catalog and with
// [ErrMalformed] if a is nil or its body is larger than [MaxBodySize], is
// not exactly one well-formed msgpack map within the nesting and element
// limits, or does not fit the type. Unknown fields are ignored, so a newer
// peer may add optional fields without a new name. Decode never panics.
// It does not call Validate.
func Decode(a *anypb.Any) (any, error) {
	if a == nil {
		return nil, fmt.Errorf("decoding: %w: nil envelope", ErrMalformed)
	}
	e, ok := catalog.byURL[a.TypeUrl]
	if !ok {
		return nil, fmt.Errorf("decoding %q: %w", clip(a.TypeUrl), ErrUnknownType)
	}
	if n := len(a.Value); n > MaxBodySize {
		return nil, fmt.Errorf("decoding %s: %w: body is %d bytes, max %d", e.name, ErrMalformed, n, MaxBodySize)
	}
	if err := checkBody(a.Value); err != nil {
		return nil, fmt.Errorf("decoding %s: %w: %v", e.name, ErrMalformed, err)
	}
	v, err := safeDecode(e, a.Value)
	if err != nil {
		return nil, fmt.Errorf("decoding %s: %w: %v", e.name, ErrMalformed, err)
	}
	return v, nil
}

// safeDecode runs the entry's decoder, turning a panic inside msgpack into
// an error. The panic value is not reported, since it may quote the body.
func safeDecode(e *entry, body []byte) (v any, err error) {
	defer func() {
		if recover() != nil {
			v, err = nil, errors.New("decoder panicked")
		}
	}()
	return e.decode(body)
}

// IsEnvelope reports whether msg is an envelope (*anypb.Any) that
// [Unwrap] would decode.
func IsEnvelope(msg any) bool {
	_, ok := msg.(*anypb.Any)
	return ok
}

// Unwrap returns the message inside msg if msg is an envelope, and msg
// itself otherwise, so that an actor can receive local structs and remote
// envelopes alike:
//
//	msg, err := messages.Unwrap(c.Message())
//	if err != nil {
//		// reply messages.NewRejected(c.Message(), err) to c.Sender()
//	}
//	switch m := msg.(type) {
//	case messages.StartRound:
//	}
//
// Decode errors are returned as they are; on error msg is nil.
func Unwrap(msg any) (any, error) {
	a, ok := msg.(*anypb.Any)
	if !ok {
		return msg, nil
	}
	return Decode(a)
}

// NewRejected builds the [Rejected] reply to msg, which could not be
// decoded or carried out because of err. Type is msg's wire name: for an
// envelope, the name part of its TypeUrl as received (quoted and cut to a
// safe length if it is not a plain name), for a registered struct its name,
// otherwise empty. Reason is err.Error(); pass only errors that are fit for
// the peer to read, such as those of [Decode] and the Validate methods.
func NewRejected(msg any, err error) Rejected {
	var r Rejected
	switch m := msg.(type) {
	case *anypb.Any:
		if m != nil {
			r.Type = wireName(m.TypeUrl)
		}
	default:
		r.Type, _ = Name(msg)
	}
	if err != nil {
		r.Reason = err.Error()
	}
	return r
}

// wireName returns the name part of an untrusted TypeUrl: unchanged if it
// is short printable ASCII, quoted and clipped otherwise.
func wireName(url string) string {
	name := strings.TrimPrefix(url, TypeURLPrefix)
	if len(name) <= maxNameInError && isPrintableASCII(name) {
		return name
	}
	return fmt.Sprintf("%q", clip(name))
}

// clip cuts an untrusted string to maxNameInError bytes, on a rune boundary.
func clip(s string) string {
	if len(s) <= maxNameInError {
		return s
	}
	i := maxNameInError
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

func isPrintableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
