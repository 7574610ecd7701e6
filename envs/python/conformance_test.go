package python

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/cyrnel/cyrnel/envs/envtest"
	"github.com/cyrnel/cyrnel/envs/module"
)

var programs = envtest.Programs{
	Print:      "import sys\nprint('hi')\nprint('warn', file=sys.stderr)",
	Output:     "cyrnel.output({'a': 1, 'b': 1})\ncyrnel.output({'b': 2, 'c': 'x'})",
	Throw:      "raise ValueError('boom')",
	Syntax:     "def f(:\n  pass",
	Loop:       "while True:\n    pass",
	Block:      "import time\nprint('started', flush=True)\nwhile True:\n    time.sleep(1)",
	Await:      "import asyncio\nawait asyncio.sleep(0.01)\nprint('awaited')",
	SetGlobal:  "import json, builtins\njson.leak = 1\nbuiltins.leak = 1",
	ReadGlobal: "import json, builtins\nprint('clean' if not hasattr(json, 'leak') and not hasattr(builtins, 'leak') else 'leaked')",
	Tool:       "cyrnel.output({'r': cyrnel.services.echo.twice(x=21)})",
	ToolError:  "try:\n    cyrnel.services.echo.fail()\nexcept cyrnel.ToolError as e:\n    print(e)",
	Flood:      "import sys\nwhile True:\n    sys.stdout.write('x' * 4096)",
	Unicode:    "print('héllo €')",
}

func TestConformance(t *testing.T) {
	envtest.Conformance(t, func(t *testing.T, b module.Bindings) module.Environment {
		e := New(slog.New(slog.NewTextHandler(io.Discard, nil)), testOptions)
		if err := e.Setup(context.Background(), module.SetupContext{Bindings: b}); err != nil {
			t.Fatal(err)
		}
		return e
	}, programs)
}
