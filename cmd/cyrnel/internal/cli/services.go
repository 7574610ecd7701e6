package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/cyrnel/cyrnel/openapi/client"
)

const servicesUsage = `Usage:
  cyrnel services add [flags] ID FILE|URL   import an OpenAPI 3.x or Swagger 2.0 document (JSON or YAML) as service ID
  cyrnel services list [flags]              list the services
  cyrnel services remove [flags] ID         remove a service and its tools

A FILE is read here and sent as content, so it works with --server too; a URL
(http:// or https://) is fetched by the host. Programs call the service's
tools as cyrnel.services.ID.TOOL(...).

Flags:
`

// Services implements cyrnel services.
func Services(args []string, version string) error {
	fs, hf := clientFlags("services", servicesUsage, version)
	adapter := fs.String("adapter", "openapi", "adapter that reads the document (add)")
	config := fs.String("config", "", `service config as JSON, or @FILE holding it (add), e.g. '{"serverUrl": "https://api.example.com"}'`)
	secrets := fs.String("secrets", "", `service secrets as JSON, or @FILE holding them (add), e.g. @secrets.json with {"api_key": "…"}`)
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	want := map[string]int{"add": 3, "list": 1, "remove": 2}
	if len(rest) == 0 || want[rest[0]] != len(rest) {
		fs.Usage()
		return errors.New("services: want add ID FILE|URL, list, or remove ID")
	}
	var in client.CreateServiceJSONRequestBody
	if rest[0] == "add" {
		if in, err = serviceInput(rest[1], rest[2], *adapter, *config, *secrets); err != nil {
			return err
		}
	}
	h, err := hf.connect("")
	if err != nil {
		return err
	}
	ctx := context.Background()
	switch rest[0] {
	case "add":
		err = addService(ctx, h, in)
	case "list":
		err = listServices(ctx, os.Stdout, h)
	default:
		if _, err = client.Check(h.api.DeleteServiceWithResponse(ctx, rest[1])); err == nil {
			fmt.Printf("removed service %s\n", rest[1])
		}
	}
	return errors.Join(err, h.close())
}

func serviceInput(id, source, adapter, config, secrets string) (client.CreateServiceJSONRequestBody, error) {
	in := client.CreateServiceJSONRequestBody{Id: id, Adapter: adapter}
	if strings.HasPrefix(source, "http://") || strings.HasPrefix(source, "https://") {
		in.Source.Url = &source
	} else {
		b, err := os.ReadFile(source)
		if err != nil {
			return in, fmt.Errorf("read service document: %w", err)
		}
		content := string(b)
		in.Source.Content = &content
	}
	var err error
	if in.Config, err = jsonObject("--config", config); err != nil {
		return in, err
	}
	in.Secrets, err = jsonObject("--secrets", secrets)
	return in, err
}

// jsonObject reads a flag's JSON object, given inline or as @FILE (which
// keeps secrets out of the shell history and the process list).
func jsonObject(name, v string) (*map[string]any, error) {
	if v == "" {
		return nil, nil
	}
	b := []byte(v)
	if file, ok := strings.CutPrefix(v, "@"); ok {
		var err error
		if b, err = os.ReadFile(file); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: want a JSON object: %w", name, err)
	}
	return &m, nil
}

func addService(ctx context.Context, h *host, in client.CreateServiceJSONRequestBody) error {
	r, err := client.Check(h.api.CreateServiceWithResponse(ctx, in))
	if err != nil {
		return fmt.Errorf("add service %s: %w", in.Id, err)
	}
	s := r.JSON201
	fmt.Printf("added service %s (%s): %d tools\n", s.Id, s.Name, s.ToolCount)
	if !s.Enabled {
		fmt.Printf("not enabled yet: its config or secrets do not validate; set them with PUT /services/%s/config and /secrets, then PATCH {\"enabled\": true}\n", s.Id)
	}
	// Listed anew: listings carry each tool's effective policy.
	return listTools(ctx, os.Stdout, h, client.ListToolsParams{ServiceId: &s.Id}, false)
}

func listServices(ctx context.Context, out io.Writer, h *host) error {
	r, err := client.Check(h.api.ListServicesWithResponse(ctx))
	if err != nil {
		return fmt.Errorf("list services: %w", err)
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tTOOLS\tENABLED\tNAME")
	for _, s := range r.JSON200.Items {
		fmt.Fprintf(w, "%s\t%d\t%t\t%s\n", s.Id, s.ToolCount, s.Enabled, s.Name)
	}
	return w.Flush()
}

const toolsUsage = `Usage: cyrnel tools [flags] [QUERY...]

Lists the tools programs can call, or the ten most relevant to QUERY (words
saying what to do), best first; a QUERY that is a tool's id (serviceId.toolId
or toolId) shows that tool alone. With --docs, prints each one's docs: how
the active environment calls it.

Flags:
`

// Tools implements cyrnel tools.
func Tools(args []string, version string) error {
	fs, hf := clientFlags("tools", toolsUsage, version)
	service := fs.String("service", "", "only this service's tools")
	docs := fs.Bool("docs", false, "print each tool's docs (Markdown) instead of the list")
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	params := client.ListToolsParams{Limit: new(int64(100))}
	if *service != "" {
		params.ServiceId = service
	}
	if len(rest) > 0 {
		// The words of a QUERY need no quotes: tools show one pet.
		q := strings.Join(rest, " ")
		params.Q = &q
		params.Limit = new(int64(10))
	}
	h, err := hf.connect("")
	if err != nil {
		return err
	}
	return errors.Join(listTools(context.Background(), os.Stdout, h, params, *docs), h.close())
}

// listTools writes every page of tools, or each one's docs, to out.
func listTools(ctx context.Context, out io.Writer, h *host, params client.ListToolsParams, docs bool) error {
	var tools []client.ToolItem
	for {
		r, err := client.Check(h.api.ListToolsWithResponse(ctx, &params))
		if err != nil {
			return fmt.Errorf("list tools: %w", err)
		}
		tools = append(tools, r.JSON200.Items...)
		// A search is ranked: its first page holds the best matches.
		if params.Q != nil || !r.JSON200.HasMore || r.JSON200.NextCursor == nil {
			break
		}
		params.Cursor = r.JSON200.NextCursor
	}
	if params.Q != nil {
		tools = named(tools, *params.Q)
	}
	if !docs {
		return printTools(out, tools)
	}
	for i, t := range tools {
		r, err := client.Check(h.api.GetToolDocsWithResponse(ctx, t.ServiceId, t.Id))
		if err != nil {
			return fmt.Errorf("docs of %s.%s: %w", t.ServiceId, t.Id, err)
		}
		if i > 0 {
			fmt.Fprintln(out)
		}
		if _, err := out.Write(r.Body); err != nil {
			return err
		}
	}
	return nil
}

// named is the tool q names by its id (toolId or serviceId.toolId), when
// the search found it; else every tool found.
func named(tools []client.ToolItem, q string) []client.ToolItem {
	for _, t := range tools {
		if q == t.Id || q == t.ServiceId+"."+t.Id {
			return []client.ToolItem{t}
		}
	}
	return tools
}

func printTools(out io.Writer, tools []client.ToolItem) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TOOL\tENABLED\tPOLICY\tDESCRIPTION")
	for _, t := range tools {
		desc, _, _ := strings.Cut(strings.TrimSpace(t.Description), "\n")
		if desc == "" {
			desc = t.Name
		}
		fmt.Fprintf(w, "%s.%s\t%t\t%s\t%s\n", t.ServiceId, t.Id, t.Enabled, t.Policy, desc)
	}
	return w.Flush()
}
