package eventmap

import (
	"encoding/json"
	"regexp"
	"strings"
	"time"

	"github.com/meshweaver/supervisor/messages"
)

// classifyError sorts codex's codexErrorInfo (raw JSON: a string such as
// "usageLimitExceeded", or an object such as
// {"httpConnectionFailed":{"httpStatusCode":401}}) and the error message
// into the class a caller can act on. A usage limit's reset time is read
// from the message ("… try again at Mar 17th, 2030 5:46 PM."), which the
// CLI writes in the host's local time, loc; now dates a bare "5:46 PM".
// It never fails: what it does not know is ErrorOther.
func classifyError(info json.RawMessage, message string, now time.Time, loc *time.Location) messages.ErrorInfo {
	out := messages.ErrorInfo{Class: messages.ErrorOther}
	var code string
	var status int
	if json.Unmarshal(info, &code) != nil {
		var obj map[string]struct {
			HTTPStatusCode *int `json:"httpStatusCode"`
		}
		if json.Unmarshal(info, &obj) == nil {
			for k, v := range obj {
				code = k // the schema's objects have exactly one key
				if v.HTTPStatusCode != nil {
					status = *v.HTTPStatusCode
				}
			}
		}
	}
	out.Code, out.HTTPStatus = code, status
	switch code {
	case "usageLimitExceeded":
		out.Class = messages.ErrorUsageLimit
		if t, ok := parseRetryAt(message, now, loc); ok {
			out.ResetsAtUnix = t.Unix()
		}
	case "contextWindowExceeded":
		out.Class = messages.ErrorContextWindow
	case "unauthorized":
		out.Class = messages.ErrorUnauthorized
	case "serverOverloaded", "rateLimitExceeded", "internalServerError", "policyCapacityUnavailable", "flexUnavailable":
		out.Class = messages.ErrorOverloaded
	case "httpConnectionFailed", "responseStreamConnectionFailed", "responseStreamDisconnected", "responseTooManyFailedAttempts":
		switch {
		case status == 401 || status == 403:
			out.Class = messages.ErrorUnauthorized
		case status == 429 || status == 529 || status >= 500 && status <= 504:
			out.Class = messages.ErrorOverloaded
		}
	}
	return out
}

// retryAtRE finds the time in codex's usage-limit message: "try again at
// Mar 17th, 2030 5:46 PM" or, for a reset later the same day, "try again
// at 5:46 PM".
var retryAtRE = regexp.MustCompile(`try again at (?:([A-Z][a-z]{2}) (\d{1,2})(?:st|nd|rd|th), (\d{4}) )?(\d{1,2}:\d{2} [AP]M)`)

// parseRetryAt reads the reset time of a usage-limit message.
func parseRetryAt(message string, now time.Time, loc *time.Location) (time.Time, bool) {
	if loc == nil {
		loc = time.Local
	}
	m := retryAtRE.FindStringSubmatch(message)
	if m == nil {
		return time.Time{}, false
	}
	if m[1] == "" {
		clock, err := time.ParseInLocation("3:04 PM", m[4], loc)
		if err != nil {
			return time.Time{}, false
		}
		n := now.In(loc)
		return time.Date(n.Year(), n.Month(), n.Day(), clock.Hour(), clock.Minute(), 0, 0, loc), true
	}
	t, err := time.ParseInLocation("Jan 2 2006 3:04 PM", strings.Join([]string{m[1], m[2], m[3], m[4]}, " "), loc)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}
