package openapi

import (
	"strconv"
	"strings"

	"github.com/cyrnel/cyrnel/envs/module"
)

func isIdentChar(r rune) bool {
	return r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

// identifier turns s into a name that is a valid identifier in both Python
// and TypeScript: runs of other characters become one "_" (and vanish at
// either end), a leading digit gets a "_" in front, a reserved word gets one
// behind. ASCII only, so every runtime and every font agrees on it.
// "repos/list-for-org" → "repos_list_for_org", "$filter" → "filter",
// "from" → "from_". An empty result is fallback.
func identifier(s, fallback string) string {
	var b strings.Builder
	pendingSep := false
	for _, r := range s {
		if !isIdentChar(r) {
			pendingSep = true
			continue
		}
		if pendingSep && b.Len() > 0 {
			b.WriteByte('_')
		}
		pendingSep = false
		b.WriteRune(r)
	}
	id := b.String()
	if id == "" {
		id = fallback
	}
	if id[0] >= '0' && id[0] <= '9' {
		id = "_" + id
	}
	if module.Reserved(id) {
		id += "_"
	}
	return id
}

// pathToolID derives a tool id from an operation without an operationId:
// the method and the path's segments, braces dropped,
// e.g. GET /pets/{petId} → get_pets_petId.
func pathToolID(method, path string) string {
	return identifier(strings.ToLower(method)+" "+path, strings.ToLower(method))
}

// uniqueNamer hands out names that are unique within one namespace: the first
// claim on a name gets it, later ones get "_2", "_3", … skipping names that
// are taken or reserved for someone else.
type uniqueNamer struct {
	taken    map[string]bool
	reserved map[string]bool
}

func newUniqueNamer(reserved map[string]bool) *uniqueNamer {
	return &uniqueNamer{taken: map[string]bool{}, reserved: reserved}
}

// claim returns base if nobody has it yet, else the first free suffixed form.
// base itself may be reserved: reservations are the claimants' own bases.
func (u *uniqueNamer) claim(base string) string {
	if !u.taken[base] {
		u.taken[base] = true
		return base
	}
	for i := 2; ; i++ {
		n := base + "_" + strconv.Itoa(i)
		if !u.taken[n] && !u.reserved[n] {
			u.taken[n] = true
			return n
		}
	}
}
