package cli

import (
	"fmt"

	"github.com/cyrnel/cyrnel/envs/sandbox"
)

// SetSandboxUIDs applies --sandbox-uids (CYRNEL_SANDBOX_UIDS), FIRST:COUNT,
// before any sandbox starts; "" keeps the default range.
func SetSandboxUIDs(v string) error {
	if v == "" {
		return nil
	}
	r, err := sandbox.ParseIDRange(v)
	if err == nil {
		err = sandbox.SetIDRange(r)
	}
	if err != nil {
		return fmt.Errorf("--sandbox-uids (CYRNEL_SANDBOX_UIDS): %w", err)
	}
	return nil
}
