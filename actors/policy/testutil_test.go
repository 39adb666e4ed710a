package policy

import (
	"encoding/json"
	"errors"
	"strconv"

	"github.com/meshweaver/supervisor/codexrpc"
)

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "!" + err.Error()
	}
	return string(b)
}

func asWire(err error, we **codexrpc.WireError) bool { return errors.As(err, we) }

func itoa(i int) string { return strconv.Itoa(i) }
