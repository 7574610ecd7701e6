package api

import (
	"context"
	"encoding/base64"
	"net/http"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/process"
)

type processBody struct {
	Body *Process
}

type pidPath struct {
	PID int64 `path:"pid" minimum:"1" example:"1" doc:"Process id."`
}

type createProcessInput struct {
	Body struct {
		Code      string         `json:"code" minLength:"1" doc:"The program to run."`
		Ref       string         `json:"ref,omitempty" maxLength:"256" doc:"A label of the client's choosing, for filtering."`
		TimeoutMs int64          `json:"timeoutMs,omitempty" minimum:"1" maximum:"86400000" doc:"Execution timeout in milliseconds (default 30000, at most 24 hours)."`
		Autorun   *bool          `json:"autorun,omitempty" doc:"Start the process at once (default true)."`
		WaitMs    int64          `json:"waitMs,omitempty" minimum:"0" maximum:"300000" doc:"Hold the response until the process is idle or this many milliseconds pass."`
		EnvConfig map[string]any `json:"envConfig,omitempty" doc:"Per-execution configuration for the environment."`
		Files     []inputFile    `json:"files,omitempty" maxItems:"20" doc:"Files placed in the program's workspace (its working directory) before it runs: at most 20, 8 MiB together; needs autorun. What the program leaves there is kept with the process (GET /processes/{pid}/files)."`
		Session   string         `json:"session,omitempty" maxLength:"64" doc:"Run in this session (POST /sessions): its globals, imports and files persist; executions run one at a time, in order. 409 when it has ended."`
	}
}

type inputFile struct {
	Path    string `json:"path" minLength:"1" maxLength:"1024" doc:"Relative path in the workspace (no .., no leading /)."`
	Content []byte `json:"content" doc:"The file's bytes, base64."`
}

type processFileList struct {
	Body struct {
		Items []OutputFile `json:"items" nullable:"false"`
	}
}

type processFilePath struct {
	PID  int64  `path:"pid" minimum:"1" example:"1" doc:"Process id."`
	Path string `path:"path" maxLength:"1024" example:"out.csv" doc:"The file's path in the workspace; escape a / inside it as %2F."`
}

type displayList struct {
	Body struct {
		Items []Display `json:"items" nullable:"false"`
	}
}

type listProcessesInput struct {
	State     processState `query:"state" doc:"Only processes in this state."`
	ExitState exitState    `query:"exitState" doc:"Only processes whose latest execution ended so."`
	Ref       string       `query:"ref" maxLength:"256" pattern:"^[^\\x00]*$" doc:"Only processes with this ref."`
	Limit     int          `query:"limit" minimum:"1" maximum:"100" default:"20" doc:"Page size."`
	Cursor    string       `query:"cursor" doc:"Opaque cursor from a previous page's nextCursor."`
}

type processList struct {
	Body struct {
		Items      []ProcessSummary `json:"items" nullable:"false"`
		NextCursor *string          `json:"nextCursor" nullable:"true" doc:"Pass as cursor for the next page; null on the last."`
		HasMore    bool             `json:"hasMore"`
	}
}

type waitInput struct {
	PID       int64 `path:"pid" minimum:"1" example:"1" doc:"Process id."`
	TimeoutMs int64 `query:"timeoutMs" minimum:"0" maximum:"300000" default:"30000" doc:"Longest wait in milliseconds."`
}

type runInput struct {
	PID  int64 `path:"pid" minimum:"1" example:"1" doc:"Process id."`
	Body *struct {
		Force bool `json:"force,omitempty" doc:"Run even though the process has results, replacing them."`
	} `required:"false"`
}

type outputBody struct {
	Body map[string]any
}

type textBody struct {
	ContentType string `header:"Content-Type"`
	Body        []byte
}

func textResponses(what string) map[string]*huma.Response {
	return map[string]*huma.Response{"200": {
		Description: what,
		Content:     map[string]*huma.MediaType{"text/plain": {Schema: &huma.Schema{Type: "string"}}},
	}}
}

func (s *server) registerProcesses(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "createProcess", Method: http.MethodPost, Path: "/processes", Tags: []string{"processes"},
		Summary: "Create a process", DefaultStatus: http.StatusCreated, MaxBodyBytes: peekLimit, BodyReadTimeout: s.peekedBody(), Errors: []int{http.StatusConflict, http.StatusInsufficientStorage, http.StatusServiceUnavailable},
		Description: "Stores the code and, unless autorun is false, runs it in the active environment; the process is owned by the calling key. With waitMs the response is held until the process is idle or the wait ends. " +
			"Only the key that started a session runs code in it: 403 at body.session for a key that sees the session (admin, approver), 422 as for a missing session for a runner key. 507 when the database's disk is full: nothing is stored and nothing runs. " +
			"With several hosts, a run in a session another host runs is forwarded to that host (which runs it and answers); 503 with Retry-After while that host cannot be reached.",
	}, func(ctx context.Context, in *createProcessInput) (*processBody, error) {
		b := in.Body
		files := make([]module.File, len(b.Files))
		for i, f := range b.Files {
			files[i] = module.File{Path: f.Path, Content: f.Content}
		}
		v, err := s.Processes.Create(ctx, process.CreateInput{
			Code: b.Code, Ref: b.Ref, TimeoutMs: b.TimeoutMs, EnvConfig: b.EnvConfig, Autorun: b.Autorun == nil || *b.Autorun,
			Wait: time.Duration(b.WaitMs) * time.Millisecond, Session: b.Session, Files: files,
		})
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		return &processBody{processOf(v)}, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "listProcesses", Method: http.MethodGet, Path: "/processes", Tags: []string{"processes"},
		Summary: "List processes", Description: "Newest first, without code, output and streams.",
	}, func(ctx context.Context, in *listProcessesInput) (*processList, error) {
		before, err := decodeCursor(in.Cursor)
		if err != nil {
			return nil, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "query.cursor", Message: "not a cursor from this API", Value: in.Cursor})
		}
		items, more, err := s.Processes.List(ctx, process.ListInput{State: string(in.State), ExitState: string(in.ExitState), Ref: in.Ref, BeforePID: before, Limit: in.Limit})
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		out := &processList{}
		out.Body.Items, out.Body.HasMore = processSummariesOf(items), more
		if more {
			c := encodeCursor(items[len(items)-1].PID)
			out.Body.NextCursor = &c
		}
		return out, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "getProcess", Method: http.MethodGet, Path: "/processes/{pid}", Tags: []string{"processes"},
		Summary: "Get a process", Description: "With its output, stdout and stderr; while it runs, what it produced so far.",
	}, func(ctx context.Context, in *pidPath) (*processBody, error) {
		v, err := s.Processes.Get(ctx, in.PID)
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		return &processBody{processOf(v)}, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "waitProcess", Method: http.MethodGet, Path: "/processes/{pid}/wait", Tags: []string{"processes"},
		Summary: "Wait for a process", Description: "Long-polls until the process is idle or timeoutMs passes, then returns it.",
	}, func(ctx context.Context, in *waitInput) (*processBody, error) {
		v, err := s.Processes.Wait(ctx, in.PID, time.Duration(in.TimeoutMs)*time.Millisecond)
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		return &processBody{processOf(v)}, nil
	})

}

// registerProcessResults registers what a process produced: its output,
// streams, code, files and displays.
func (s *server) registerProcessResults(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "getProcessOutput", Method: http.MethodGet, Path: "/processes/{pid}/output", Tags: []string{"processes"},
		Summary: "Get a process's structured output", Description: "The merged cyrnel.output() object itself.",
	}, func(ctx context.Context, in *pidPath) (*outputBody, error) {
		v, err := s.Processes.Get(ctx, in.PID)
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		return &outputBody{v.Output}, nil
	})

	for _, part := range []struct{ id, path, what string }{
		{"getProcessStdout", "stdout", "Captured standard output."},
		{"getProcessStderr", "stderr", "Captured standard error."},
		{"getProcessCode", "code", "The stored code."},
	} {
		huma.Register(api, huma.Operation{
			OperationID: part.id, Method: http.MethodGet, Path: "/processes/{pid}/" + part.path, Tags: []string{"processes"},
			Summary: part.what, Responses: textResponses(part.what),
		}, func(ctx context.Context, in *pidPath) (*textBody, error) {
			v, err := s.Processes.Get(ctx, in.PID)
			if err != nil {
				return nil, s.problem(ctx, err)
			}
			text := map[string]string{"stdout": v.Stdout, "stderr": v.Stderr, "code": v.Code}[part.path]
			return &textBody{ContentType: "text/plain; charset=utf-8", Body: []byte(text)}, nil
		})
	}

	huma.Register(api, huma.Operation{
		OperationID: "listProcessFiles", Method: http.MethodGet, Path: "/processes/{pid}/files", Tags: []string{"processes"},
		Summary:     "List the files a process left",
		Description: "What the latest execution left in its workspace when it ended (one-shot processes; at most 20 files, 256 MiB together: past that they are dropped, outputTruncated is set and stderr says so). Deleted with the process.",
	}, func(ctx context.Context, in *pidPath) (*processFileList, error) {
		files, err := s.Processes.Files(ctx, in.PID)
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		out := &processFileList{}
		out.Body.Items = outputFilesOf(files)
		return out, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "getProcessFile", Method: http.MethodGet, Path: "/processes/{pid}/files/{path}", Tags: []string{"processes"},
		Summary: "Download a file a process left", Description: "Raw bytes as application/octet-stream (the name in Content-Disposition carries the extension), an attachment (Content-Disposition), with nosniff and a sandboxing Content-Security-Policy.",
		Responses: map[string]*huma.Response{"200": {Description: "The file, streamed.", Headers: downloadHeaders(),
			Content: map[string]*huma.MediaType{"application/octet-stream": {Schema: &huma.Schema{Type: "string", Format: "binary"}}}}},
	}, func(ctx context.Context, in *processFilePath) (*huma.StreamResponse, error) {
		size, content, err := s.Processes.File(ctx, in.PID, in.Path)
		if err != nil {
			return nil, s.problemAt(ctx, err, inPath)
		}
		return s.streamDownload(in.Path, size, content, "pid", in.PID), nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "listProcessDisplays", Method: http.MethodGet, Path: "/processes/{pid}/displays", Tags: []string{"processes"},
		Summary:     "List a process's displays",
		Description: "What cyrnel.display() recorded, figures left open in pyplot, and the value of a final expression (kind result), as MIME bundles; while it runs, those so far. Capped: past the cap displays are dropped, outputTruncated is set and stderr says so.",
	}, func(ctx context.Context, in *pidPath) (*displayList, error) {
		ds, err := s.Processes.Displays(ctx, in.PID)
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		out := &displayList{}
		out.Body.Items = displaysOf(ds)
		return out, nil
	})

}

// registerProcessControl registers what changes an existing process: kill,
// run again, delete.
func (s *server) registerProcessControl(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "killProcess", Method: http.MethodPost, Path: "/processes/{pid}/kill", Tags: []string{"processes"},
		Summary: "Kill a process", Errors: []int{http.StatusConflict},
		Description: "A running process becomes terminating and ends canceled shortly after; a queued one ends canceled at once. 409 when it is already idle.",
	}, func(ctx context.Context, in *pidPath) (*processBody, error) {
		v, err := s.Processes.Kill(ctx, in.PID)
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		return &processBody{processOf(v)}, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "runProcess", Method: http.MethodPost, Path: "/processes/{pid}/run", Tags: []string{"processes"},
		Summary: "Run a process again", Errors: []int{http.StatusConflict, http.StatusInsufficientStorage},
		Description: "Runs the stored code again. 409 unless the process is idle; a process that has results needs force.",
	}, func(ctx context.Context, in *runInput) (*processBody, error) {
		force := in.Body != nil && in.Body.Force
		v, err := s.Processes.Run(ctx, in.PID, force)
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		return &processBody{processOf(v)}, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "deleteProcess", Method: http.MethodDelete, Path: "/processes/{pid}", Tags: []string{"processes"},
		Summary: "Delete a process", DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusConflict},
		Description: "409 unless the process is idle.",
	}, func(ctx context.Context, in *pidPath) (*struct{}, error) {
		if err := s.Processes.Delete(ctx, in.PID); err != nil {
			return nil, s.problem(ctx, err)
		}
		return nil, nil
	})
}

func encodeCursor(pid int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("p" + strconv.FormatInt(pid, 10)))
}

func decodeCursor(c string) (int64, error) {
	if c == "" {
		return 0, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) < 2 || b[0] != 'p' {
		return 0, strconv.ErrSyntax
	}
	pid, err := strconv.ParseInt(string(b[1:]), 10, 64)
	if err != nil || pid < 1 {
		return 0, strconv.ErrSyntax
	}
	return pid, nil
}
