package openapi

// The adapter domains are what Definition leaves for Invoke: the host stores
// them as JSON and hands them back through Hydrate, so they hold plain data
// only, with every default resolved when the document is read.

// domainVersion is bumped when the shape below changes incompatibly.
const domainVersion = 1

// serviceDomain is the service-level adapter domain.
type serviceDomain struct {
	Version int `json:"v"`
	// SourceURL is where the document was read from; relative server URLs
	// resolve against it.
	SourceURL       string                    `json:"sourceUrl,omitempty"`
	Servers         []server                  `json:"servers,omitempty"`
	SecuritySchemes map[string]securityScheme `json:"securitySchemes,omitempty"`
	// Security is the document's security; nil when it declares none.
	Security *[]requirement `json:"security,omitempty"`
}

type server struct {
	URL       string                    `json:"url"`
	Variables map[string]serverVariable `json:"variables,omitempty"`
}

type serverVariable struct {
	Default string   `json:"default"`
	Enum    []string `json:"enum,omitempty"`
}

// securityScheme is a security scheme as Invoke applies it.
type securityScheme struct {
	Type   string `json:"type"`             // apiKey, http, oauth2, openIdConnect, mutualTLS
	Scheme string `json:"scheme,omitempty"` // http: basic, bearer, …
	In     string `json:"in,omitempty"`     // apiKey: header, query, cookie
	Name   string `json:"name,omitempty"`   // apiKey: header, query or cookie name
}

// requirement names the security schemes that must all be applied together.
type requirement []string

// toolDomain is the tool-level adapter domain: how to make the request.
type toolDomain struct {
	Version int    `json:"v"`
	Method  string `json:"method"`
	Path    string `json:"path"`
	// Servers are the operation's servers, else its path item's.
	Servers []server `json:"servers,omitempty"`
	// Security is the operation's own; nil means the document's applies, an
	// empty list means none.
	Security *[]requirement `json:"security,omitempty"`
	Params   []param        `json:"params,omitempty"`
	Body     *body          `json:"body,omitempty"`
}

// param maps one input property to a request parameter.
type param struct {
	Property      string `json:"property"`
	In            string `json:"in"` // path, query, header, cookie
	Name          string `json:"name"`
	Style         string `json:"style"`
	Explode       bool   `json:"explode"`
	AllowReserved bool   `json:"allowReserved,omitempty"`
	// ContentType is set for a parameter defined by content rather than a
	// schema: its value is serialised in that media type first.
	ContentType string `json:"contentType,omitempty"`
}

// body says how the "body" property becomes the request body.
type body struct {
	MediaType string `json:"mediaType"`
	// Encoding holds, for form and multipart bodies, how each top-level
	// property is encoded, by property name.
	Encoding map[string]encoding `json:"encoding,omitempty"`
}

type encoding struct {
	// ContentType is the part's media type (multipart), or a media type the
	// value is serialised in first (form).
	ContentType   string `json:"contentType,omitempty"`
	Style         string `json:"style"`
	Explode       bool   `json:"explode"`
	AllowReserved bool   `json:"allowReserved,omitempty"`
	// Binary marks a multipart file part: sent with a filename.
	Binary bool `json:"binary,omitempty"`
}
