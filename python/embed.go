// Package python embeds the stdlib-only cyrnel runtime package that runs
// inside every interpreter, so the binary carries it wherever it goes.
package python

import "embed"

// Runtime holds the cyrnel package: cyrnel/*.py.
//
//go:embed cyrnel/*.py
var Runtime embed.FS
