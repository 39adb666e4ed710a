package policy

import (
	"errors"
	"strconv"

	"github.com/meshweaver/supervisor/codexrpc"
)

func asWire(err error, we **codexrpc.WireError) bool { return errors.As(err, we) }

func itoa(i int) string { return strconv.Itoa(i) }
