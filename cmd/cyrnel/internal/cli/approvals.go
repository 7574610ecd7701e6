package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/cyrnel/cyrnel/openapi/client"
)

const approvalsUsage = `Usage: cyrnel approvals [flags]
       cyrnel approvals approve ID
       cyrnel approvals deny ID

Lists the approvals tool calls wait on (pending ones unless --state says
otherwise), or decides one: approve lets the waiting call go ahead, deny
makes it raise ToolError in the program. Use --server (or CYRNEL_SERVER):
the calls wait in a running server.

Flags:
`

// Approvals implements cyrnel approvals.
func Approvals(args []string, version string) error {
	fs, hf := clientFlags("approvals", approvalsUsage, version)
	state := fs.String("state", "pending", "list approvals in this state: pending, approved, denied, expired, or all")
	pid := fs.Int64("pid", 0, "list only the approvals of this process")
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	ctx := context.Background()
	switch {
	case len(rest) == 0:
		params := client.ListApprovalsParams{Limit: new(int64(100))}
		if *state != "all" {
			s := client.ListApprovalsParamsState(*state)
			params.State = &s
		}
		if *pid > 0 {
			params.Pid = pid
		}
		h, err := hf.connect("")
		if err != nil {
			return err
		}
		return errors.Join(listApprovals(ctx, h, params), h.close())
	case len(rest) == 2 && (rest[0] == "approve" || rest[0] == "deny"):
		h, err := hf.connect("")
		if err != nil {
			return err
		}
		return errors.Join(decideApproval(ctx, h, rest[0], rest[1]), h.close())
	}
	fs.Usage()
	return fmt.Errorf("approvals: want no arguments, or approve ID, or deny ID; got %q", rest)
}

func listApprovals(ctx context.Context, h *host, params client.ListApprovalsParams) error {
	var all []client.Approval
	for {
		r, err := client.Check(h.api.ListApprovalsWithResponse(ctx, &params))
		if err != nil {
			return fmt.Errorf("list approvals: %w", err)
		}
		all = append(all, r.JSON200.Items...)
		if !r.JSON200.HasMore || r.JSON200.NextCursor == nil {
			break
		}
		params.Cursor = r.JSON200.NextCursor
	}
	return printApprovals(os.Stdout, all)
}

func printApprovals(out io.Writer, items []client.Approval) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tSTATE\tPID\tTOOL\tEXPIRES\tPARAMETERS")
	for _, a := range items {
		pid := "-"
		if a.Pid != nil {
			pid = fmt.Sprint(*a.Pid)
		}
		params, _ := json.Marshal(a.Parameters)
		fmt.Fprintf(w, "%s\t%s\t%s\t%s.%s\t%s\t%s\n", a.Id, a.State, pid, a.ServiceId, a.ToolId, a.ExpiresAt.Local().Format("15:04:05"), params)
	}
	return w.Flush()
}

func decideApproval(ctx context.Context, h *host, verb, id string) error {
	var state client.ApprovalState
	if verb == "approve" {
		r, err := client.Check(h.api.ApproveApprovalWithResponse(ctx, id))
		if err != nil {
			return fmt.Errorf("approve %s: %w", id, err)
		}
		state = r.JSON200.State
	} else {
		r, err := client.Check(h.api.DenyApprovalWithResponse(ctx, id))
		if err != nil {
			return fmt.Errorf("deny %s: %w", id, err)
		}
		state = r.JSON200.State
	}
	fmt.Printf("%s %s\n", id, state)
	return nil
}
