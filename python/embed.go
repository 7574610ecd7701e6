// Package python embeds the stdlib-only cyrnel runtime package that runs
// inside every interpreter, so the binary carries it wherever it goes.
package python

import "embed"

// Runtime holds the cyrnel package: cyrnel/*.py and its py.typed marker.
//
//go:embed cyrnel/*.py cyrnel/py.typed
var Runtime embed.FS
