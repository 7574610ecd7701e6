package modules

import (
	"encoding/json"
	"fmt"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/schema"
)

// CheckLimits refuses a module config whose "limits" ask for more than m
// has (module.LimitsConfig.Beyond), whoever asks: no key may raise them past
// the machine. A zero m checks nothing.
func CheckLimits(cfg map[string]any, m module.Machine) error {
	raw, ok := cfg["limits"]
	if !ok || m == (module.Machine{}) {
		return nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return fmt.Errorf("limits config: %w", err)
	}
	l := module.DefaultLimits
	if err := json.Unmarshal(b, &l); err != nil {
		return fmt.Errorf("limits config: %w", err)
	}
	beyond := l.Beyond(m)
	if len(beyond) == 0 {
		return nil
	}
	fe := &schema.FieldError{Field: "config.limits", Message: "more than this machine has"}
	for _, p := range beyond {
		fe.Problems = append(fe.Problems, schema.Problem{Path: "/" + p.Field, Message: p.Message})
	}
	return fe
}
