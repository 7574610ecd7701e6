package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cyrnel/cyrnel/openapi/client"
)

const keysUsage = `Usage:
  cyrnel keys create --name NAME --role ROLE [--role ROLE …] [--expires WHEN]
  cyrnel keys list
  cyrnel keys revoke ID

Manages the API keys of a server (an admin key is needed: the data
directory's api-key file, or CYRNEL_API_KEY). Roles: runner (run code and use
tools: give this to an agent), approver (decide approvals, read the audit and
every process), admin (everything). create prints the new key alone on
stdout (it is shown only this once; the server keeps its hash) and what it
is on stderr, so KEY=$(cyrnel keys create --name agent --role runner) works.

Flags:
`

// roleFlags collects repeated --role flags.
type roleFlags []string

func (r *roleFlags) String() string { return strings.Join(*r, ",") }

func (r *roleFlags) Set(v string) error {
	*r = append(*r, v)
	return nil
}

// Keys implements cyrnel keys.
func Keys(args []string, version string) error {
	fs, hf := clientFlags("keys", keysUsage, version)
	name := fs.String("name", "", "what the key is for (create)")
	var roles roleFlags
	fs.Var(&roles, "role", "a role of the key: runner, approver or admin; repeat for several (create)")
	expires := fs.String("expires", "", "when the key stops working: a duration from now (720h) or an RFC 3339 time (create)")
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	want := map[string]int{"create": 1, "list": 1, "revoke": 2}
	if len(rest) == 0 || want[rest[0]] != len(rest) {
		fs.Usage()
		return errors.New("keys: want create, list, or revoke ID")
	}
	var in client.CreateKeyJSONRequestBody
	if rest[0] == "create" {
		if in, err = keyInput(*name, roles, *expires, time.Now()); err != nil {
			return err
		}
	}
	h, err := hf.connect("")
	if err != nil {
		return err
	}
	ctx := context.Background()
	switch rest[0] {
	case "create":
		err = createKey(ctx, h, in)
	case "list":
		err = listKeys(ctx, os.Stdout, h)
	default:
		if _, err = client.Check(h.api.RevokeKeyWithResponse(ctx, rest[1])); err == nil {
			fmt.Fprintf(os.Stderr, "revoked key %s\n", rest[1])
		} else {
			err = fmt.Errorf("revoke key %s: %w", rest[1], err)
		}
	}
	return errors.Join(err, h.close())
}

// keyInput checks the flags of keys create; the server checks the rest.
func keyInput(name string, roles []string, expires string, now time.Time) (client.CreateKeyJSONRequestBody, error) {
	in := client.CreateKeyJSONRequestBody{Name: name}
	if name == "" {
		return in, errors.New("keys create needs --name")
	}
	if len(roles) == 0 {
		return in, errors.New("keys create needs --role (runner, approver or admin)")
	}
	for _, r := range roles {
		in.Roles = append(in.Roles, client.CreateKeyInputBodyRoles(r))
	}
	if expires != "" {
		if d, err := time.ParseDuration(expires); err == nil {
			t := now.Add(d)
			in.ExpiresAt = &t
		} else if t, err := time.Parse(time.RFC3339, expires); err == nil {
			in.ExpiresAt = &t
		} else {
			return in, fmt.Errorf("--expires %q: want a duration (720h) or an RFC 3339 time", expires)
		}
	}
	return in, nil
}

func createKey(ctx context.Context, h *host, in client.CreateKeyJSONRequestBody) error {
	r, err := client.Check(h.api.CreateKeyWithResponse(ctx, in))
	if err != nil {
		return fmt.Errorf("create key: %w", err)
	}
	k := r.JSON201
	roles := make([]string, len(k.Roles))
	for i, role := range k.Roles {
		roles[i] = string(role)
	}
	expiry := "never expires"
	if k.ExpiresAt != nil {
		expiry = "expires " + k.ExpiresAt.Local().Format(time.RFC3339)
	}
	fmt.Fprintf(os.Stderr, "created key %s %q (roles: %s; %s); it is shown only now:\n", k.Id, k.Name, strings.Join(roles, ", "), expiry)
	fmt.Println(k.Key)
	return nil
}

func listKeys(ctx context.Context, out io.Writer, h *host) error {
	params := client.ListKeysParams{Limit: new(int64(100))}
	var all []client.Key
	for {
		r, err := client.Check(h.api.ListKeysWithResponse(ctx, &params))
		if err != nil {
			return fmt.Errorf("list keys: %w", err)
		}
		all = append(all, r.JSON200.Items...)
		if !r.JSON200.HasMore || r.JSON200.NextCursor == nil {
			break
		}
		params.Cursor = r.JSON200.NextCursor
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tNAME\tROLES\tCREATED\tEXPIRES\tLAST USED")
	stamp := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.Local().Format(time.DateTime)
	}
	for _, k := range all {
		roles := make([]string, len(k.Roles))
		for i, role := range k.Roles {
			roles[i] = string(role)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", k.Id, k.Name, strings.Join(roles, ","), stamp(&k.CreatedAt), stamp(k.ExpiresAt), stamp(k.LastUsedAt))
	}
	return w.Flush()
}
