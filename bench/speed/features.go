package main

import (
	"context"

	"github.com/layerstream/layerstream/engine"
)

// Engine features that targets 2 and 4 measure, as hooks. A hook is nil until it is wired to the engine's API;
// while nil, its targets print UNAVAILABLE with the reason below and count as missed. Wiring one is the few
// lines shown in its comment: nothing else in the harness changes.

// directIO turns on the engine option that reads streamed shards with O_DIRECT, bypassing the page cache
// (target 2, and the I/O-bound setting of target 4).
var directIO = func(o *engine.Options) { o.DirectIO = engine.DirectIOOn }

// noDirectIO is the reason targets 2 and 4 are unavailable while directIO is nil.
const noDirectIO = "no engine option to read shards with O_DIRECT is wired (directIO in bench/speed/features.go)"

// generateBatch generates every request as one batch: each layer load serves all sequences, each with its own
// KV cache and position, finishing independently (target 4).
var generateBatch = func(ctx context.Context, e *engine.Engine, reqs []engine.Request) ([]*engine.Result, error) {
	return e.GenerateBatch(ctx, reqs, nil)
}

// noBatch is the reason target 4 is unavailable while generateBatch is nil.
const noBatch = "no batched generation is wired (generateBatch in bench/speed/features.go)"
