package client

import (
	"context"
	"net/http"
)

// WithBearer authenticates every request with the server's API key
// (CYRNEL_API_KEY); an empty key sends nothing.
func WithBearer(key string) ClientOption {
	return WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		return nil
	})
}
