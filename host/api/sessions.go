package api

import (
	"context"
	"encoding/base64"
	"io"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cyrnel/cyrnel/host/session"
	"github.com/cyrnel/cyrnel/host/store"
)

// Session is a session as the API shows it.
type Session struct {
	ID          string       `json:"id" doc:"Opaque id (ses_…)."`
	Module      string       `json:"module" doc:"The environment its interpreter runs."`
	State       sessionState `json:"state"`
	Ref         string       `json:"ref,omitempty"`
	CreatedAt   time.Time    `json:"createdAt"`
	LastUsedAt  time.Time    `json:"lastUsedAt"`
	EndedAt     *time.Time   `json:"endedAt,omitempty"`
	EndReason   string       `json:"endReason,omitempty" doc:"Why it ended: deleted, idle_timeout, max_lifetime, memory_limit, cpu_limit, output_limit, timeout, killed (a killed program did not stop), crashed, start_failed, host_restart, host_shutdown, host_lost (its host stopped renewing its lease)."`
	IdleTimeout int64        `json:"idleTimeoutMs"`
	MaxLifetime int64        `json:"maxLifetimeMs"`
	CPUMs       *int64       `json:"cpuMs,omitempty" doc:"CPU time its executions used."`
	MemoryBytes *int64       `json:"memoryBytes,omitempty" doc:"The highest peak memory of its executions."`
	Owner       string       `json:"owner,omitempty" doc:"The id of the API key that started the session: only it runs code in the session, and a runner key sees only its own. Absent when no key did (a server without authentication)."`
	HostID      string       `json:"hostId" doc:"The host whose interpreter the session is. Any host serves requests for it: one that does not run it forwards them there (503 with Retry-After while that host cannot be reached; a lost host's sessions end host_lost)."`
}

func sessionView(r *store.Session) Session {
	return Session{ID: r.ID, Module: r.Module, State: sessionState(r.State), Ref: r.Ref, CreatedAt: r.CreatedAt, LastUsedAt: r.LastUsedAt,
		EndedAt: r.EndedAt, EndReason: r.EndReason, IdleTimeout: r.IdleTimeoutMs, MaxLifetime: r.MaxLifetimeMs,
		CPUMs: r.CPUMs, MemoryBytes: r.MemoryBytes, Owner: r.Owner, HostID: r.HostID}
}

type sessionBody struct {
	Body Session
}

type sessionPath struct {
	ID string `path:"id" maxLength:"64" example:"ses_Q2VZ4L7TNXMBK6JH3RPA5YWDCE" doc:"Session id."`
}

type createSessionInput struct {
	Body struct {
		Module        string         `json:"module,omitempty" maxLength:"64" doc:"The environment (default: the active one, which is the only one sessions run in)."`
		EnvConfig     map[string]any `json:"envConfig,omitempty" doc:"Configuration for the environment, kept with the session."`
		IdleTimeoutMs int64          `json:"idleTimeoutMs,omitempty" minimum:"1" maximum:"604800000" doc:"End the session after this long without an execution (default 600000, at most 7 days)."`
		MaxLifetimeMs int64          `json:"maxLifetimeMs,omitempty" minimum:"1" maximum:"604800000" doc:"End the session this long after it started (default 86400000, at most 7 days)."`
		Ref           string         `json:"ref,omitempty" maxLength:"256" doc:"A label of the client's choosing."`
	}
}

type listSessionsInput struct {
	State  sessionState `query:"state" doc:"Only sessions in this state."`
	Limit  int          `query:"limit" minimum:"1" maximum:"100" default:"20" doc:"Page size."`
	Cursor string       `query:"cursor" doc:"Opaque cursor from a previous page's nextCursor."`
}

type sessionList struct {
	Body struct {
		Items      []Session `json:"items" nullable:"false"`
		NextCursor *string   `json:"nextCursor" nullable:"true" doc:"Pass as cursor for the next page; null on the last."`
		HasMore    bool      `json:"hasMore"`
	}
}

func (s *server) registerSessions(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "createSession", Method: http.MethodPost, Path: "/sessions", Tags: []string{"sessions"},
		Summary: "Start a session", DefaultStatus: http.StatusCreated,
		Errors: []int{http.StatusTooManyRequests, http.StatusServiceUnavailable},
		Description: "Starts a long-lived sandboxed interpreter (same sandbox and limits as one-shot executions) and answers once it is ready. " +
			"Run code in it with POST /processes {code, session}. 422 (body.module) when the environment has no sessions; 429 past the host's limit of live sessions.",
	}, func(ctx context.Context, in *createSessionInput) (*sessionBody, error) {
		b := in.Body
		row, err := s.Sessions.Create(ctx, session.CreateInput{Module: b.Module, EnvConfig: b.EnvConfig, IdleTimeoutMs: b.IdleTimeoutMs, MaxLifetimeMs: b.MaxLifetimeMs, Ref: b.Ref})
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		return &sessionBody{sessionView(row)}, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "listSessions", Method: http.MethodGet, Path: "/sessions", Tags: []string{"sessions"},
		Summary: "List sessions", Description: "Newest first.",
	}, func(ctx context.Context, in *listSessionsInput) (*sessionList, error) {
		f := store.SessionFilter{State: string(in.State), Limit: in.Limit + 1}
		if in.Cursor != "" {
			at, id, ok := decodeSessionCursor(in.Cursor)
			if !ok {
				return nil, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "query.cursor", Message: "not a cursor from this API", Value: in.Cursor})
			}
			f.BeforeTime, f.BeforeID = &at, id
		}
		rows, err := s.Sessions.List(ctx, f)
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		out := &sessionList{}
		out.Body.Items = []Session{}
		if len(rows) > in.Limit {
			rows, out.Body.HasMore = rows[:in.Limit], true
			last := rows[len(rows)-1]
			c := base64.RawURLEncoding.EncodeToString([]byte(last.CreatedAt.UTC().Format(time.RFC3339Nano) + " " + last.ID))
			out.Body.NextCursor = &c
		}
		for i := range rows {
			out.Body.Items = append(out.Body.Items, sessionView(&rows[i]))
		}
		return out, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "getSession", Method: http.MethodGet, Path: "/sessions/{id}", Tags: []string{"sessions"},
		Summary: "Get a session", Description: forwardNote,
		Errors: []int{http.StatusServiceUnavailable},
	}, func(ctx context.Context, in *sessionPath) (*sessionBody, error) {
		row, err := s.Sessions.Get(ctx, in.ID)
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		return &sessionBody{sessionView(row)}, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "deleteSession", Method: http.MethodDelete, Path: "/sessions/{id}", Tags: []string{"sessions"},
		Summary: "End a session", DefaultStatus: http.StatusNoContent,
		Description: "Ends the session (reason deleted): its interpreter is killed, a running execution and those queued end with reason session_ended. Ending an ended session does nothing. " + forwardNote,
		Errors:      []int{http.StatusServiceUnavailable},
	}, func(ctx context.Context, in *sessionPath) (*struct{}, error) {
		if err := s.Sessions.End(ctx, in.ID); err != nil {
			return nil, s.problem(ctx, err)
		}
		return nil, nil
	})
}

// forwardNote is how every operation on one session behaves with several
// hosts.
const forwardNote = "With several hosts, a request that reaches a host other than the session's (hostId) is forwarded there; 503 with Retry-After while that host cannot be reached."

func decodeSessionCursor(c string) (time.Time, string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", false
	}
	ts, id, ok := strings.Cut(string(b), " ")
	at, err := time.Parse(time.RFC3339Nano, ts)
	return at, id, ok && err == nil
}

type sessionFilePath struct {
	ID   string `path:"id" maxLength:"64" example:"ses_Q2VZ4L7TNXMBK6JH3RPA5YWDCE" doc:"Session id."`
	Path string `path:"path" maxLength:"1024" example:"data/in.csv" doc:"The file's path in the workspace, relative; escape a / inside it as %2F (data%2Fin.csv)."`
}

type putFileInput struct {
	ID      string `path:"id" maxLength:"64" example:"ses_Q2VZ4L7TNXMBK6JH3RPA5YWDCE" doc:"Session id."`
	Path    string `path:"path" maxLength:"1024" example:"data/in.csv" doc:"The file's path in the workspace, relative; escape a / inside it as %2F (data%2Fin.csv)."`
	RawBody []byte `contentType:"*/*"`
}

// downloadHeaders documents a streamed download's headers (a streamed
// response declares none of its own).
func downloadHeaders() map[string]*huma.Header {
	h := map[string]*huma.Header{}
	for _, name := range []string{"Content-Disposition", "Content-Length", "Content-Security-Policy", "Content-Type", "X-Content-Type-Options"} {
		h[name] = &huma.Header{Schema: &huma.Schema{Type: "string"}}
	}
	return h
}

// streamDownload streams a program's file at path p, of size bytes, from
// r, as a download: always application/octet-stream as the document
// declares (the name in Content-Disposition carries the extension, and no
// type is guessed that a client or browser would act on); a browser that
// opens the URL saves it rather than rendering it (an f.html a program
// wrote would otherwise run as a page of this origin), never sniffs another
// type from it, and a CSP sandbox keeps it inert if it is rendered anyway.
// owner names whose file it is, for the log.
func (s *server) streamDownload(p string, size int64, r io.Reader, owner ...any) *huma.StreamResponse {
	return &huma.StreamResponse{Body: func(hc huma.Context) {
		hc.SetHeader("Content-Type", "application/octet-stream")
		hc.SetHeader("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}))
		hc.SetHeader("X-Content-Type-Options", "nosniff")
		hc.SetHeader("Content-Security-Policy", "default-src 'none'; sandbox")
		hc.SetHeader("Content-Length", strconv.FormatInt(size, 10))
		hc.SetStatus(http.StatusOK)
		// Headers are gone: a failure past here can only cut the body
		// short, which Content-Length lets the client see.
		if _, err := io.Copy(hc.BodyWriter(), r); err != nil {
			s.Log.Warn("file download cut short", append(owner, "path", p, "err", err)...)
		}
	}}
}

// File is one file of a session's workspace.
type File struct {
	Path       string    `json:"path"`
	Size       int64     `json:"size"`
	ModifiedAt time.Time `json:"modifiedAt"`
}

type fileList struct {
	Body struct {
		Items []File `json:"items" nullable:"false"`
	}
}

func (s *server) registerSessionFiles(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "listSessionFiles", Method: http.MethodGet, Path: "/sessions/{id}/files", Tags: []string{"sessions"},
		Summary: "List a session's files", Description: "The files of its workspace (its working directory), at most 1000. 409 when the session has ended.",
		Errors: []int{http.StatusConflict, http.StatusServiceUnavailable},
	}, func(ctx context.Context, in *sessionPath) (*fileList, error) {
		files, err := s.Sessions.ListFiles(ctx, in.ID)
		if err != nil {
			return nil, s.problemAt(ctx, err, inPath)
		}
		out := &fileList{}
		out.Body.Items = make([]File, len(files))
		for i, f := range files {
			out.Body.Items[i] = File{Path: f.Path, Size: f.Size, ModifiedAt: f.ModifiedAt}
		}
		return out, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "putSessionFile", Method: http.MethodPut, Path: "/sessions/{id}/files/{path}", Tags: []string{"sessions"},
		Summary: "Upload a file into a session's workspace", DefaultStatus: http.StatusNoContent, MaxBodyBytes: session.MaxFileBytes,
		Description: "The body is the file's bytes (at most 8 MiB); directories are created. 422 (path.path) for a path that leaves the workspace.",
		Errors:      []int{http.StatusConflict, http.StatusServiceUnavailable},
	}, func(ctx context.Context, in *putFileInput) (*struct{}, error) {
		if err := s.Sessions.PutFile(ctx, in.ID, in.Path, in.RawBody); err != nil {
			return nil, s.problemAt(ctx, err, inPath)
		}
		return nil, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "getSessionFile", Method: http.MethodGet, Path: "/sessions/{id}/files/{path}", Tags: []string{"sessions"},
		Summary: "Download a file from a session's workspace", Description: "Raw bytes as application/octet-stream (the name in Content-Disposition carries the extension), an attachment (Content-Disposition), with nosniff and a sandboxing Content-Security-Policy.",
		Errors: []int{http.StatusConflict, http.StatusServiceUnavailable},
		Responses: map[string]*huma.Response{"200": {Description: "The file, streamed.", Headers: downloadHeaders(),
			Content: map[string]*huma.MediaType{"application/octet-stream": {Schema: &huma.Schema{Type: "string", Format: "binary"}}}}},
	}, func(ctx context.Context, in *sessionFilePath) (*huma.StreamResponse, error) {
		r, size, err := s.Sessions.OpenFile(ctx, in.ID, in.Path)
		if err != nil {
			return nil, s.problemAt(ctx, err, inPath)
		}
		return s.streamDownload(in.Path, size, r, "session", in.ID), nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "deleteSessionFile", Method: http.MethodDelete, Path: "/sessions/{id}/files/{path}", Tags: []string{"sessions"},
		Summary: "Delete a file from a session's workspace", DefaultStatus: http.StatusNoContent,
		Errors: []int{http.StatusConflict, http.StatusServiceUnavailable},
	}, func(ctx context.Context, in *sessionFilePath) (*struct{}, error) {
		if err := s.Sessions.DeleteFile(ctx, in.ID, in.Path); err != nil {
			return nil, s.problemAt(ctx, err, inPath)
		}
		return nil, nil
	})
}
