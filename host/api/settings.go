package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"
)

type objectBody struct {
	Body map[string]any
}

type idPath struct {
	ID string `path:"id" maxLength:"64" pattern:"^[A-Za-z_][A-Za-z0-9_]*$" example:"python" doc:"Module or service id."`
}

type putObjectInput struct {
	ID   string `path:"id" maxLength:"64" pattern:"^[A-Za-z_][A-Za-z0-9_]*$" example:"python" doc:"Module or service id."`
	Body map[string]any
}

type secretsSetBody struct {
	Body struct {
		Set []string `json:"set" nullable:"false" doc:"JSON pointers of the secrets that are set; values are never returned."`
	}
}

// registerSettings adds GET/PUT {base}/{id}/config and {base}/{id}/secrets;
// noun names the kind in operation ids (getModuleConfig, setServiceSecrets);
// configErrs are the error statuses setting the config adds.
func (s *server) registerSettings(api huma.API, base, noun, applied string, st settings, configErrs ...int) {
	tags := []string{base[1:]}
	huma.Register(api, huma.Operation{
		OperationID: "get" + noun + "Config", Method: http.MethodGet, Path: base + "/{id}/config", Tags: tags,
		Summary: "Get a " + lower(noun) + "'s config",
	}, func(ctx context.Context, in *idPath) (*objectBody, error) {
		c, err := st.Config(ctx, in.ID)
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		return &objectBody{c}, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "set" + noun + "Config", Method: http.MethodPut, Path: base + "/{id}/config", Tags: tags,
		Summary: "Replace a " + lower(noun) + "'s config", Description: "Validated against its configSchema, then applied" + applied,
		Errors: configErrs,
	}, func(ctx context.Context, in *putObjectInput) (*objectBody, error) {
		c, err := st.SetConfig(ctx, in.ID, in.Body)
		if err != nil {
			return nil, s.problemAt(ctx, err, isBody)
		}
		return &objectBody{c}, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "get" + noun + "Secrets", Method: http.MethodGet, Path: base + "/{id}/secrets", Tags: tags,
		Summary: "List which of a " + lower(noun) + "'s secrets are set", Description: "Never returns values.",
	}, func(ctx context.Context, in *idPath) (*secretsSetBody, error) {
		set, err := st.SecretsSet(ctx, in.ID)
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		out := &secretsSetBody{}
		out.Body.Set = orEmpty(set)
		return out, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "set" + noun + "Secrets", Method: http.MethodPut, Path: base + "/{id}/secrets", Tags: tags,
		Summary:     "Replace a " + lower(noun) + "'s secrets",
		Description: "Validated against its secretsSchema and sealed at rest (AES-256-GCM), then applied" + applied + " The answer lists which are set.",
	}, func(ctx context.Context, in *putObjectInput) (*secretsSetBody, error) {
		set, err := st.SetSecrets(ctx, in.ID, in.Body)
		if err != nil {
			return nil, s.problemAt(ctx, err, isBody)
		}
		out := &secretsSetBody{}
		out.Body.Set = orEmpty(set)
		return out, nil
	})
}

func lower(s string) string {
	if s == "" {
		return s
	}
	return string(s[0]+'a'-'A') + s[1:]
}
