package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cyrnel/cyrnel/host/modules"
)

type healthBody struct {
	Body struct {
		Status      healthStatus `json:"status" doc:"Always ok when the server answers."`
		Version     string       `json:"version"`
		Environment *string      `json:"environment" nullable:"true" doc:"Module id of the active environment; null when none could be activated."`
	}
}

type envView struct {
	Module   string         `json:"module" doc:"Module id."`
	InFlight int            `json:"inFlight" doc:"Executions queued or running in it."`
	Status   map[string]any `json:"status,omitempty" doc:"Environment-specific health: pool, sandbox layers in force."`
}

type environmentBody struct {
	Body struct {
		Active   *envView        `json:"active,omitempty" doc:"The active environment; absent when none could be activated (see error)."`
		Draining []envView       `json:"draining" nullable:"false" doc:"Environments finishing their executions before teardown."`
		Error    string          `json:"error,omitempty" doc:"Why no environment is active."`
		Sandbox  hostSandboxView `json:"sandbox" doc:"What this machine gives every sandbox, decided when the server started."`
	}
}

type hostSandboxView struct {
	AllowUnsandboxed bool     `json:"allowUnsandboxed" doc:"The server was started with --allow-unsandboxed: module configs may turn sandbox layers off, and a machine lacking a cgroup runs without it."`
	Cgroups          bool     `json:"cgroups" doc:"Memory and pids cgroups bound each sandbox as a whole; false: only per-process rlimits do (possible only with allowUnsandboxed)."`
	Missing          []string `json:"missing" nullable:"false" doc:"Sandbox layers this machine lacks, each with the reason."`
}

type setEnvironmentInput struct {
	Body struct {
		Module string `json:"module" minLength:"1" doc:"Module id of the environment to activate (python, typescript)."`
	}
}

type moduleView struct {
	ID            string          `json:"id"`
	Type          moduleType      `json:"type"`
	Name          string          `json:"name"`
	Version       string          `json:"version"`
	Description   string          `json:"description"`
	ConfigSchema  json.RawMessage `json:"configSchema" doc:"JSON Schema of the module's config."`
	SecretsSchema json.RawMessage `json:"secretsSchema" doc:"JSON Schema of the module's secrets."`
	Enabled       bool            `json:"enabled"`
	Active        bool            `json:"active" doc:"For environments: whether it is the active one."`
}

type moduleBody struct {
	Body moduleView
}

type moduleList struct {
	Body struct {
		Items      []moduleView `json:"items" nullable:"false"`
		NextCursor *string      `json:"nextCursor" nullable:"true" doc:"Always null: every module fits one page."`
		HasMore    bool         `json:"hasMore"`
	}
}

type moduleIDPath struct {
	ID string `path:"id" maxLength:"64" pattern:"^[A-Za-z_][A-Za-z0-9_]*$" example:"python" doc:"Module id."`
}

type markdownBody struct {
	ContentType string `header:"Content-Type"`
	Body        []byte
}

func markdownResponses(what string) map[string]*huma.Response {
	return map[string]*huma.Response{"200": {
		Description: what,
		Content:     map[string]*huma.MediaType{"text/markdown": {Schema: &huma.Schema{Type: "string"}}},
	}}
}

func toModuleView(v modules.ModuleView) moduleView {
	return moduleView{
		ID: v.Info.ID, Type: moduleType(v.Info.Type), Name: v.Info.Name, Version: v.Info.Version, Description: v.Info.Description,
		ConfigSchema: v.Info.ConfigSchema, SecretsSchema: v.Info.SecretsSchema, Enabled: v.Enabled, Active: v.Active,
	}
}

type readyBody struct {
	Body struct {
		Status readyStatus `json:"status" doc:"Always ready when the answer is 200."`
	}
}

func (s *server) registerHealth(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "getReadiness", Method: http.MethodGet, Path: "/health/ready", Tags: []string{"health"},
		Summary: "Readiness",
		Description: "200 while this host can serve work: its database answers and was not found corrupt, and the active environment is set up. " +
			"Otherwise 503, the detail saying what is wrong; a balancer sends work elsewhere. Never needs authentication.",
		Security: []map[string][]string{}, Errors: []int{http.StatusServiceUnavailable},
	}, func(ctx context.Context, _ *struct{}) (*readyBody, error) {
		if s.Ready != nil {
			if err := s.Ready.Ready(ctx); err != nil {
				return nil, huma.Error503ServiceUnavailable("not ready: " + err.Error())
			}
		}
		out := &readyBody{}
		out.Body.Status = statusReady
		return out, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "getHealth", Method: http.MethodGet, Path: "/health", Tags: []string{"health"},
		Summary: "Liveness", Description: "Never needs authentication.", Security: []map[string][]string{},
	}, func(context.Context, *struct{}) (*healthBody, error) {
		out := &healthBody{}
		out.Body.Status, out.Body.Version = statusOK, s.Version
		if active, _, _ := s.Environment.Status(); active != nil {
			out.Body.Environment = &active.Module
		}
		return out, nil
	})
}

func (s *server) environment() *environmentBody {
	active, draining, setupErr := s.Environment.Status()
	out := &environmentBody{}
	if active != nil {
		out.Body.Active = &envView{Module: active.Module, InFlight: active.InFlight, Status: active.Status}
	}
	out.Body.Draining = make([]envView, 0, len(draining))
	for _, d := range draining {
		out.Body.Draining = append(out.Body.Draining, envView{Module: d.Module, InFlight: d.InFlight, Status: d.Status})
	}
	out.Body.Error = setupErr
	out.Body.Sandbox = hostSandboxView{AllowUnsandboxed: s.Sandbox.AllowUnsandboxed, Cgroups: s.Sandbox.Cgroups, Missing: orEmpty(s.Sandbox.Missing)}
	return out
}

// storedConfig locates what is wrong with the stored config of the module
// PUT /environment names at the field that named it: the request holds no
// config.
func storedConfig(string) string { return "body.module" }

func (s *server) registerEnvironment(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "getEnvironment", Method: http.MethodGet, Path: "/environment", Tags: []string{"environment"},
		Summary: "Get the active environment", Description: "The active environment, with its health, and the draining ones.",
	}, func(context.Context, *struct{}) (*environmentBody, error) {
		return s.environment(), nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "setEnvironment", Method: http.MethodPut, Path: "/environment", Tags: []string{"environment"},
		Summary: "Switch the active environment",
		Description: "New processes go to the new environment at once; the previous one drains (its executions finish) and is torn down. " +
			"An unknown, disabled or failing module changes nothing; one whose stored config weakens the sandbox is refused with 403 unless the server was started with --allow-unsandboxed.",
		Errors: []int{http.StatusForbidden},
	}, func(ctx context.Context, in *setEnvironmentInput) (*environmentBody, error) {
		if err := s.Environment.Activate(ctx, in.Body.Module); err != nil {
			if errors.Is(err, modules.ErrUnknownModule) {
				// The request is fine; the module it names is not.
				return nil, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "body.module", Message: err.Error(), Value: in.Body.Module})
			}
			return nil, s.problemAt(ctx, err, storedConfig)
		}
		return s.environment(), nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "getEnvironmentDocs", Method: http.MethodGet, Path: "/environment/docs", Tags: []string{"environment"},
		Summary: "How to write code for the active environment", Responses: markdownResponses("Markdown for those who write programs."),
	}, func(ctx context.Context, _ *struct{}) (*markdownBody, error) {
		env, err := s.Environment.Active()
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		doc, err := env.Docs(ctx)
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		return &markdownBody{ContentType: "text/markdown; charset=utf-8", Body: []byte(doc)}, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "listModules", Method: http.MethodGet, Path: "/modules", Tags: []string{"modules"},
		Summary: "List modules", Description: "Environments and adapters, with their schemas.",
	}, func(ctx context.Context, _ *struct{}) (*moduleList, error) {
		ms, err := s.Modules.Modules(ctx)
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		out := &moduleList{}
		out.Body.Items = make([]moduleView, 0, len(ms))
		for _, m := range ms {
			out.Body.Items = append(out.Body.Items, toModuleView(m))
		}
		return out, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "getModule", Method: http.MethodGet, Path: "/modules/{id}", Tags: []string{"modules"},
		Summary: "Get a module",
	}, func(ctx context.Context, in *moduleIDPath) (*moduleBody, error) {
		m, err := s.Modules.Module(ctx, in.ID)
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		return &moduleBody{toModuleView(m)}, nil
	})
}

type patchModuleInput struct {
	ID   string `path:"id" maxLength:"64" pattern:"^[A-Za-z_][A-Za-z0-9_]*$" example:"python" doc:"Module id."`
	Body enabledBody
}

func (s *server) registerModuleSettings(api huma.API) {
	tags := []string{"modules"}
	huma.Register(api, huma.Operation{
		OperationID: "updateModule", Method: http.MethodPatch, Path: "/modules/{id}", Tags: tags,
		Summary: "Enable or disable a module", Errors: []int{http.StatusConflict},
		Description: "A disabled environment cannot be activated; the active one cannot be disabled (409).",
	}, func(ctx context.Context, in *patchModuleInput) (*moduleBody, error) {
		m, err := s.Modules.SetEnabled(ctx, in.ID, in.Body.Enabled)
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		return &moduleBody{toModuleView(m)}, nil
	})

}
