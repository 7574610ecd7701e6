package client

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Problem is an RFC 9457 problem the server answered instead of a result.
type Problem struct {
	Status int
	ErrorModel
}

func (p *Problem) Error() string {
	msg := fmt.Sprintf("%d %s", p.Status, http.StatusText(p.Status))
	if p.Detail != nil && *p.Detail != "" {
		msg += ": " + *p.Detail
	}
	if p.Errors != nil {
		for _, d := range *p.Errors {
			msg += "; "
			if d.Location != nil {
				msg += *d.Location + ": "
			}
			if d.Message != nil {
				msg += *d.Message
			}
		}
	}
	return msg
}

// Response is what every generated response type has.
type Response interface {
	StatusCode() int
	GetBody() []byte
}

// Check turns a generated call's answer into an error when the call failed
// or the server answered with a status outside 2xx (a *Problem), so callers
// can write r, err := client.Check(c.GetProcessWithResponse(ctx, pid)).
func Check[R Response](r R, err error) (R, error) {
	if err != nil {
		return r, err
	}
	if s := r.StatusCode(); s < 200 || s > 299 {
		return r, newProblem(s, r.GetBody())
	}
	return r, nil
}

func newProblem(status int, body []byte) *Problem {
	p := &Problem{Status: status}
	if json.Unmarshal(body, &p.ErrorModel) != nil || p.Detail == nil {
		// Not a problem document (a proxy's error page, say): keep the text.
		text := strings.TrimSpace(string(body))
		p.Detail = &text
	}
	return p
}
