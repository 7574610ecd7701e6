package api

import (
	"context"
	"encoding/base64"
	"net/http"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cyrnel/cyrnel/host/caller"
	"github.com/cyrnel/cyrnel/host/changes"
	"github.com/cyrnel/cyrnel/host/keys"
)

type createKeyInput struct {
	Body struct {
		Name      string      `json:"name" minLength:"1" maxLength:"100" doc:"What the key is for (an agent, a person)."`
		Roles     callerRoles `json:"roles" nullable:"false" minItems:"1" maxItems:"3" uniqueItems:"true" doc:"runner: run code and use tools; approver: approvals, the audit, reading processes; admin: everything."`
		ExpiresAt *time.Time  `json:"expiresAt,omitempty" doc:"After this the key is refused (RFC 3339, in the future)."`
	}
}

type createdKeyBody struct {
	Body *CreatedKey
}

type keyBody struct {
	Body *Key
}

type keyPath struct {
	ID string `path:"id" maxLength:"64" example:"key_187b3c1a2f4e5d6c9a8b7c6d5e4f3a2b" doc:"Key id."`
}

type listKeysInput struct {
	Limit  int    `query:"limit" minimum:"1" maximum:"100" default:"20" doc:"Page size."`
	Cursor string `query:"cursor" doc:"Opaque cursor from a previous page's nextCursor."`
}

type keyList struct {
	Body struct {
		Items      []Key   `json:"items" nullable:"false"`
		NextCursor *string `json:"nextCursor" nullable:"true" doc:"Pass as cursor for the next page; null on the last."`
		HasMore    bool    `json:"hasMore"`
	}
}

type listChangesInput struct {
	Limit  int    `query:"limit" minimum:"1" maximum:"100" default:"20" doc:"Page size."`
	Cursor string `query:"cursor" doc:"Opaque cursor from a previous page's nextCursor."`
}

type changeList struct {
	Body struct {
		Items      []Change `json:"items" nullable:"false"`
		NextCursor *string  `json:"nextCursor" nullable:"true" doc:"Pass as cursor for the next page; null on the last."`
		HasMore    bool     `json:"hasMore"`
	}
}

func (s *server) registerKeys(api huma.API) {
	tags := []string{"keys"}
	huma.Register(api, huma.Operation{
		OperationID: "createKey", Method: http.MethodPost, Path: "/keys", Tags: tags, DefaultStatus: http.StatusCreated,
		Summary:     "Create an API key",
		Description: "The answer holds the key itself (`key`), this once: the host stores only its hash. Give an agent a `runner` key.",
	}, func(ctx context.Context, in *createKeyInput) (*createdKeyBody, error) {
		k, err := s.Keys.Create(ctx, keys.CreateInput{Name: in.Body.Name, Roles: []caller.Role(in.Body.Roles), ExpiresAt: in.Body.ExpiresAt})
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		return &createdKeyBody{&CreatedKey{Key: *keyOf(&k.Key), Secret: k.Secret}}, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "listKeys", Method: http.MethodGet, Path: "/keys", Tags: tags,
		Summary: "List API keys, newest first (the bootstrap key heads the first page)",
	}, func(ctx context.Context, in *listKeysInput) (*keyList, error) {
		before, ok := decodeStringCursor(in.Cursor)
		if !ok {
			return nil, badCursor(in.Cursor)
		}
		items, more, err := s.Keys.List(ctx, keys.ListInput{Before: before, Limit: in.Limit})
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		out := &keyList{}
		out.Body.Items, out.Body.HasMore = keysOf(items), more
		if more {
			c := base64.RawURLEncoding.EncodeToString([]byte(items[len(items)-1].ID))
			out.Body.NextCursor = &c
		}
		return out, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "getKey", Method: http.MethodGet, Path: "/keys/{id}", Tags: tags, Summary: "Get an API key (never the key itself)",
	}, func(ctx context.Context, in *keyPath) (*keyBody, error) {
		k, err := s.Keys.Get(ctx, in.ID)
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		return &keyBody{keyOf(k)}, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "revokeKey", Method: http.MethodDelete, Path: "/keys/{id}", Tags: tags, DefaultStatus: http.StatusNoContent,
		Summary:     "Revoke an API key",
		Description: "The key is refused at once on this host and within a second on every other. The bootstrap key is changed where it is configured (403 here).",
		Errors:      []int{http.StatusNotFound},
	}, func(ctx context.Context, in *keyPath) (*struct{}, error) {
		if err := s.Keys.Revoke(ctx, in.ID); err != nil {
			return nil, s.problem(ctx, err)
		}
		return nil, nil
	})

}

// registerChanges registers the record of configuration changes.
func (s *server) registerChanges(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "listChanges", Method: http.MethodGet, Path: "/changes", Tags: []string{"changes"},
		Summary:     "The record of configuration changes, newest first",
		Description: "Modules, the environment, services, tools' enabled flags, tool policies and keys: what changed and which key changed it. Secrets appear by name only. The newest 10,000 changes of the last year are kept.",
	}, func(ctx context.Context, in *listChangesInput) (*changeList, error) {
		before, ok := decodeStringCursor(in.Cursor)
		if !ok {
			return nil, badCursor(in.Cursor)
		}
		var beforeID int64
		if before != "" {
			id, err := strconv.ParseInt(before, 10, 64)
			if err != nil || id < 1 {
				return nil, badCursor(in.Cursor)
			}
			beforeID = id
		}
		items, more, err := s.Changes.List(ctx, changes.ListInput{BeforeID: beforeID, Limit: in.Limit})
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		out := &changeList{}
		out.Body.Items, out.Body.HasMore = changesOf(items), more
		if more {
			c := base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(items[len(items)-1].ID, 10)))
			out.Body.NextCursor = &c
		}
		return out, nil
	})
}
