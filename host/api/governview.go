package api

import (
	"time"

	"github.com/cyrnel/cyrnel/host/approval"
	"github.com/cyrnel/cyrnel/host/audit"
	"github.com/cyrnel/cyrnel/host/changes"
	"github.com/cyrnel/cyrnel/host/keys"
)

// The wire shapes of keys, audit records and changes, mapped from their
// domain packages' plain types.

// Key is a key as the API shows it: never the key itself.
type Key struct {
	ID         string      `json:"id" doc:"Opaque id (key_…), or bootstrap for the operator's key."`
	Name       string      `json:"name"`
	Roles      callerRoles `json:"roles" nullable:"false"`
	CreatedAt  time.Time   `json:"createdAt"`
	ExpiresAt  *time.Time  `json:"expiresAt,omitempty" doc:"After this the key is refused."`
	LastUsedAt *time.Time  `json:"lastUsedAt,omitempty" doc:"When the key last authenticated a request, to within a minute."`
}

// CreatedKey is a new key with its secret, which is shown this once.
type CreatedKey struct {
	Key
	Secret string `json:"key" doc:"The key to send as Authorization: Bearer <key>. Shown only in this answer: the host keeps its hash."`
}

// Call is an audit record as the API shows it.
type Call struct {
	ID         int64          `json:"id"`
	At         time.Time      `json:"at" doc:"When the call was made."`
	PID        *int64         `json:"pid,omitempty" doc:"The calling process; absent for calls from the API or MCP."`
	ServiceID  string         `json:"serviceId"`
	ToolID     string         `json:"toolId"`
	Policy     decision       `json:"policy" doc:"The policy decision the call met."`
	ApprovalID *string        `json:"approvalId,omitempty" doc:"The approval the call waited on."`
	Outcome    callOutcome    `json:"outcome"`
	Status     *int           `json:"status,omitempty" doc:"The upstream's HTTP status, when it answered."`
	DurationMs float64        `json:"durationMs" doc:"From the call reaching the host to its answer, approval wait included."`
	Source     callSource     `json:"source" doc:"Where the call came from: a program (run over HTTP or MCP) or POST /tools/{serviceId}/{toolId}/invoke."`
	Parameters map[string]any `json:"parameters" doc:"The parameters, secret-bearing fields redacted."`
	KeyID      string         `json:"keyId,omitempty" doc:"The API key behind the call: for a call from a program, the key that owns its process; for POST /tools/{serviceId}/{toolId}/invoke, the caller's. Absent when no key did (a server without authentication)."`
}

// Change is a change as the API shows it.
type Change struct {
	ID     int64          `json:"id"`
	At     time.Time      `json:"at"`
	KeyID  string         `json:"keyId" doc:"The key that made the change (bootstrap: the operator's key; host: the host itself)."`
	Action string         `json:"action" doc:"What was done: module.config, module.secrets, module.enable, module.disable, environment.switch, service.create, service.delete, service.config, service.secrets, service.enable, service.disable, service.refresh, tool.enable, tool.disable, policies.set, key.create, key.revoke."`
	Target string         `json:"target" doc:"What it was done to: a module, service or key id, serviceId.toolId for a tool, tool-policies."`
	Detail map[string]any `json:"detail" doc:"What was set: a config, the names of the secrets set (never their values), the enabled flag, the environment's module, a key's name and roles."`
}

func keyOf(k *keys.Key) *Key {
	return &Key{ID: k.ID, Name: k.Name, Roles: callerRoles(k.Roles), CreatedAt: k.CreatedAt, ExpiresAt: k.ExpiresAt, LastUsedAt: k.LastUsedAt}
}

func keysOf(ks []keys.Key) []Key {
	out := make([]Key, len(ks))
	for i := range ks {
		out[i] = *keyOf(&ks[i])
	}
	return out
}

func callsOf(cs []audit.Call) []Call {
	out := make([]Call, len(cs))
	for i, c := range cs {
		out[i] = Call{ID: c.ID, At: c.At, PID: c.PID, ServiceID: c.ServiceID, ToolID: c.ToolID, Policy: decision(c.Policy), ApprovalID: c.ApprovalID,
			Outcome: callOutcome(c.Outcome), Status: c.Status, DurationMs: c.DurationMs, Source: callSource(c.Source), Parameters: c.Parameters, KeyID: c.KeyID}
	}
	return out
}

func changesOf(cs []changes.Change) []Change {
	out := make([]Change, len(cs))
	for i, c := range cs {
		out[i] = Change{ID: c.ID, At: c.At, KeyID: c.KeyID, Action: c.Action, Target: c.Target, Detail: c.Detail}
	}
	return out
}

// Approval is an approval as the API shows it.
type Approval struct {
	ID         string         `json:"id" doc:"Opaque id (apr_…)."`
	State      approvalState  `json:"state"`
	PID        *int64         `json:"pid,omitempty" doc:"The process whose call waits; absent for calls from the API or MCP."`
	ServiceID  string         `json:"serviceId"`
	ToolID     string         `json:"toolId"`
	Parameters map[string]any `json:"parameters" doc:"The call's parameters, secret-bearing fields redacted."`
	CreatedAt  time.Time      `json:"createdAt"`
	ExpiresAt  time.Time      `json:"expiresAt"`
	DecidedAt  *time.Time     `json:"decidedAt,omitempty"`
	KeyID      string         `json:"keyId,omitempty" doc:"The API key that owns the execution that asked; it cannot decide this approval. Absent when no key did (a server without authentication)."`
	DecidedBy  string         `json:"decidedBy,omitempty" doc:"The API key that approved or denied it; absent while pending, when it expired, or on a server without authentication."`
}

func approvalOf(a *approval.Approval) *Approval {
	return &Approval{ID: a.ID, State: approvalState(a.State), PID: a.PID, ServiceID: a.ServiceID, ToolID: a.ToolID, Parameters: a.Parameters,
		CreatedAt: a.CreatedAt, ExpiresAt: a.ExpiresAt, DecidedAt: a.DecidedAt, KeyID: a.KeyID, DecidedBy: a.DecidedBy}
}

func approvalsOf(as []approval.Approval) []Approval {
	out := make([]Approval, len(as))
	for i := range as {
		out[i] = *approvalOf(&as[i])
	}
	return out
}
