// Package peer reaches the other hosts sharing this host's database: the
// address each advertises (http, or https when it says so), the transport
// requests to them take, and the mark a request one host sends another
// carries. A request sent on keeps its caller's Authorization: the host it
// reaches authenticates and authorises it again, so sending it there grants
// nothing the key does not have.
package peer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cyrnel/cyrnel/host/process"
	"github.com/cyrnel/cyrnel/openapi/client"
)

// ForwardedHeader marks a request one host sent another: it is served where
// it arrives and never sent on again. Its value is the sending host's id.
const ForwardedHeader = "Cyrnel-Forwarded-By"

// ErrUnreachable: the host cannot be reached now (no live lease or address,
// a refused or failed connection); it answers again, or its lease runs out
// and what it ran is finished as host_lost.
var ErrUnreachable = errors.New("cannot be reached now; try again")

// BaseURL reads an advertised address: host:port (http) or an http(s) URL.
func BaseURL(addr string) (*url.URL, error) {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return nil, err
	}
	if u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, errors.New("want host:port or an http(s) URL")
	}
	return u, nil
}

// Transport is the transport of requests to the other hosts: the default
// one (proxies from the environment, TLS verified against the system's
// roots) with a short dial timeout, since a dead host's address may not
// answer at all and the client is better told 503 soon than after the
// system's connect timeout.
func Transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return t
}

// Directory says where the hosts are.
type Directory interface {
	// Self is this host's id.
	Self() string
	// Address is where hostID is reached (host:port or a URL) while its
	// lease lives; an error when it has none.
	Address(ctx context.Context, hostID string) (string, error)
}

// Client calls the other hosts' APIs on behalf of a caller.
type Client struct {
	dir       Directory
	transport http.RoundTripper
}

// NewClient calls the hosts dir knows.
func NewClient(dir Directory) *Client {
	return &Client{dir: dir, transport: Transport()}
}

// Self is this host's id.
func (c *Client) Self() string { return c.dir.Self() }

// api is a client of hostID's API whose requests carry authorization (the
// caller's Authorization header, "" for none) and the forwarded mark.
func (c *Client) api(ctx context.Context, hostID, authorization string) (*client.ClientWithResponses, error) {
	addr, err := c.dir.Address(ctx, hostID)
	if err != nil {
		return nil, fmt.Errorf("host %s %w (%w)", hostID, ErrUnreachable, err)
	}
	base, err := BaseURL(addr)
	if err != nil {
		return nil, fmt.Errorf("host %s %w: it advertises %q: %w", hostID, ErrUnreachable, addr, err)
	}
	self := c.dir.Self()
	return client.NewClientWithResponses(base.String(),
		client.WithHTTPClient(&http.Client{Transport: c.transport}),
		client.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			if authorization != "" {
				req.Header.Set("Authorization", authorization)
			}
			req.Header.Set(ForwardedHeader, self)
			return nil
		}))
}

// sent wraps the error of a request to hostID: the host's own answer (a
// *client.Problem) as it is, anything else as unreachable.
func sent(hostID string, err error) error {
	var p *client.Problem
	if errors.As(err, &p) {
		if p.Status == http.StatusServiceUnavailable {
			return fmt.Errorf("host %s %w (%w)", hostID, ErrUnreachable, p)
		}
		return fmt.Errorf("host %s answered %w", hostID, p)
	}
	return fmt.Errorf("host %s %w (%w)", hostID, ErrUnreachable, err)
}

// CreateProcess creates (and with in.Autorun starts) a process on hostID,
// which runs in.Session, as the caller authorization names, and returns its
// pid. in.Wait and in.Files are not sent: the process is followed from its
// row, which every host reads.
func (c *Client) CreateProcess(ctx context.Context, hostID, authorization string, in process.CreateInput) (int64, error) {
	api, err := c.api(ctx, hostID, authorization)
	if err != nil {
		return 0, err
	}
	body := client.CreateProcessJSONRequestBody{Code: in.Code, Autorun: &in.Autorun}
	if in.Ref != "" {
		body.Ref = &in.Ref
	}
	if in.Session != "" {
		body.Session = &in.Session
	}
	if in.TimeoutMs != 0 {
		body.TimeoutMs = &in.TimeoutMs
	}
	if in.EnvConfig != nil {
		body.EnvConfig = &in.EnvConfig
	}
	r, err := client.Check(api.CreateProcessWithResponse(ctx, body))
	if err != nil {
		return 0, sent(hostID, err)
	}
	if r.JSON201 == nil {
		return 0, sent(hostID, errors.New("the answer carries no process"))
	}
	return r.JSON201.Pid, nil
}

// EndSession ends session id, which hostID runs, as the caller
// authorization names.
func (c *Client) EndSession(ctx context.Context, hostID, authorization, id string) error {
	api, err := c.api(ctx, hostID, authorization)
	if err != nil {
		return err
	}
	if _, err := client.Check(api.DeleteSessionWithResponse(ctx, id)); err != nil {
		return sent(hostID, err)
	}
	return nil
}
