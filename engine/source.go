package engine

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/hub"
	"github.com/layerstream/layerstream/shards"
)

// Unit names (docs/DESIGN.md): a checkpoint splits into embed, layer.N, norm and lm_head.
const (
	unitEmbed  = "embed"
	unitNorm   = "norm"
	unitLMHead = "lm_head"
)

func layerUnit(i int) string { return "layer." + strconv.Itoa(i) }

// Tensor names of the non-layer units.
const (
	embedWeight  = "model.embed_tokens.weight"
	normWeight   = "model.norm.weight"
	lmHeadWeight = "lm_head.weight"
)

// openShards resolves model (a shard folder, a Hugging Face checkpoint folder or a Hub repo id) to a shard set.
// A checkpoint is split on first use, into opts.ShardDir or shards.DefaultDir; later opens reuse the split
// while it still matches the checkpoint's tensors.
func openShards(ctx context.Context, model string, opts Options) (*shards.Set, error) {
	dir, err := hub.Resolve(ctx, model, opts.Hub)
	if err != nil {
		return nil, err
	}
	if shards.IsSet(dir) {
		return shards.Open(dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		return nil, fmt.Errorf("model %s: neither a shard folder (no %s) nor a checkpoint folder (no config.json)", dir, shards.ManifestFile)
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		return nil, err
	}
	out := opts.ShardDir
	if out == "" {
		out = shards.DefaultDir(dir)
	}
	if shards.IsSet(out) {
		set, err := shards.Open(out)
		if err == nil && sameTensors(set, ck) {
			return set, nil
		}
		slog.Info("existing split does not match the checkpoint; splitting again", "shards", out, "err", err)
	}
	slog.Info("splitting the checkpoint into per-layer shards (first use)", "checkpoint", dir, "shards", out)
	return shards.Split(ctx, ck, shards.SplitOptions{Out: out, Progress: opts.SplitProgress})
}

// sameTensors reports whether set holds exactly ck's tensors (names, dtypes, shapes).
func sameTensors(set *shards.Set, ck *checkpoint.Checkpoint) bool {
	n := 0
	for _, u := range set.Units() {
		for _, t := range u.Tensors {
			c, ok := ck.Tensor(t.Name)
			if !ok || c.DType != t.DType || c.Length != t.Length || fmt.Sprint(c.Shape) != fmt.Sprint(t.Shape) {
				return false
			}
			n++
		}
	}
	return n == len(ck.Tensors)
}
