package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cyrnel/cyrnel/host/adapters"
	"github.com/cyrnel/cyrnel/host/services"
)

type serviceBody struct {
	Body *Service
}

type serviceIDPath struct {
	ID string `path:"id" maxLength:"64" pattern:"^[A-Za-z_][A-Za-z0-9_]*$" example:"petstore" doc:"Service id."`
}

type createServiceInput struct {
	Body struct {
		ID      string `json:"id" minLength:"1" maxLength:"64" doc:"Service id: an identifier, the name programs use (cyrnel.services.<id>)."`
		Adapter string `json:"adapter" minLength:"1" doc:"Adapter module that reads the source (openapi)."`
		Source  struct {
			URL     string `json:"url,omitempty" doc:"Where to fetch the description."`
			Content string `json:"content,omitempty" doc:"The description itself (JSON or YAML)."`
		} `json:"source" doc:"Exactly one of url and content."`
		Config  map[string]any `json:"config,omitempty" doc:"Service config, validated against the service's configSchema."`
		Secrets map[string]any `json:"secrets,omitempty" doc:"Service secrets, validated against its secretsSchema; write-only."`
	}
}

type enabledBody struct {
	Enabled bool `json:"enabled" doc:"Whether it is callable."`
}

type patchServiceInput struct {
	ID   string `path:"id" maxLength:"64" pattern:"^[A-Za-z_][A-Za-z0-9_]*$" example:"petstore" doc:"Service id."`
	Body enabledBody
}

type serviceList struct {
	Body struct {
		Items      []*Service `json:"items" nullable:"false"`
		NextCursor *string    `json:"nextCursor" nullable:"true" doc:"Always null: every service fits one page."`
		HasMore    bool       `json:"hasMore"`
	}
}

type refreshBody struct {
	Body *RefreshResult
}

func (s *server) registerServices(api huma.API) {
	tags := []string{"services"}
	huma.Register(api, huma.Operation{
		OperationID: "createService", Method: http.MethodPost, Path: "/services", Tags: tags, DefaultStatus: http.StatusCreated,
		Summary: "Import a service", MaxBodyBytes: 64 << 20, Errors: []int{http.StatusConflict},
		Description: "Reads the description with the adapter and stores the service with its tools. It is enabled at once when its config and secrets validate.",
	}, func(ctx context.Context, in *createServiceInput) (*serviceBody, error) {
		v, err := s.Services.Create(ctx, services.CreateInput{
			ID: in.Body.ID, Adapter: in.Body.Adapter, Source: adapters.Source{URL: in.Body.Source.URL, Content: in.Body.Source.Content},
			Config: in.Body.Config, Secrets: in.Body.Secrets,
		})
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		return &serviceBody{serviceOf(v)}, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "listServices", Method: http.MethodGet, Path: "/services", Tags: tags, Summary: "List services",
	}, func(ctx context.Context, _ *struct{}) (*serviceList, error) {
		vs, err := s.Services.List(ctx)
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		out := &serviceList{}
		out.Body.Items = servicesOf(vs)
		return out, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "getService", Method: http.MethodGet, Path: "/services/{id}", Tags: tags, Summary: "Get a service with its tools",
	}, func(ctx context.Context, in *serviceIDPath) (*serviceBody, error) {
		v, err := s.Services.Get(ctx, in.ID)
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		return &serviceBody{serviceOf(v)}, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "updateService", Method: http.MethodPatch, Path: "/services/{id}", Tags: tags,
		Summary: "Enable or disable a service", Description: "Enabling needs the service's config and secrets to validate.",
	}, func(ctx context.Context, in *patchServiceInput) (*serviceBody, error) {
		v, err := s.Services.SetEnabled(ctx, in.ID, in.Body.Enabled)
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		return &serviceBody{serviceOf(v)}, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "deleteService", Method: http.MethodDelete, Path: "/services/{id}", Tags: tags, DefaultStatus: http.StatusNoContent,
		Summary: "Remove a service and its tools",
	}, func(ctx context.Context, in *serviceIDPath) (*struct{}, error) {
		if err := s.Services.Delete(ctx, in.ID); err != nil {
			return nil, s.problem(ctx, err)
		}
		return nil, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "refreshService", Method: http.MethodPost, Path: "/services/{id}/refresh", Tags: tags,
		Summary: "Re-read a service's source", Description: "Tools that survive keep their enabled flags; new ones are listed in added and enabled.",
	}, func(ctx context.Context, in *serviceIDPath) (*refreshBody, error) {
		r, err := s.Services.Refresh(ctx, in.ID)
		if err != nil {
			return nil, s.problemAt(ctx, err, notInRequest)
		}
		return &refreshBody{refreshResultOf(r)}, nil
	})

}
