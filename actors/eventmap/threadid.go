package eventmap

import (
	"encoding/json"

	"github.com/meshweaver/supervisor/codexrpc"
)

// ThreadOf is the threadId of a notification's or a request's params
// ("" when none); ok is false when params are not a JSON object.
//
// The app-server actor runs it for every server request, and for a
// notification whose header (NoteHeadAfter) could not be read. Decoding
// the params whole (json.Unmarshal) cost as much as the reader's own
// decode; codexrpc.ScanStrings reads the one member, and leaves anything
// unusual to json.Unmarshal.
func ThreadOf(params json.RawMessage) (threadID string, ok bool) {
	var v [1]string
	if codexrpc.ScanStrings(params, threadIDKey[:], v[:]) {
		return v[0], true
	}
	var head struct {
		ThreadID string `json:"threadId"`
	}
	if json.Unmarshal(params, &head) != nil {
		return "", false
	}
	return head.ThreadID, true
}

var threadIDKey = [1]string{"threadId"}
