package engine

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/gguf"
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

// openShards resolves model (a shard folder, a Hugging Face checkpoint folder, a GGUF file, a Hub repo id or a
// GGUF file in one) to a shard set.
// A checkpoint is split on first use, into opts.ShardDir or shards.DefaultDir, and the split follows it when it
// changes (shards.Ensure). A shard folder given directly is used as it is, with a warning when the checkpoint it
// was made from has changed since.
func openShards(ctx context.Context, model string, opts Options) (*shards.Set, error) {
	dir, err := hub.Resolve(ctx, model, opts.Hub)
	if err != nil {
		return nil, err
	}
	if shards.IsSet(dir) {
		set, err := shards.Open(dir)
		if err == nil {
			if err := set.Pin(); err != nil {
				return nil, err
			}
			if changed := set.SourceChanged(); changed != "" {
				slog.Warn("the checkpoint this shard folder was split from has changed since: pass the checkpoint "+
					"folder to follow it, or run layerstream split on it with --out "+dir, "shards", dir,
					"checkpoint", set.Source().Checkpoint, "changed", changed)
			}
		}
		return set, err
	}
	ck, err := OpenCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	if opts.Arithmetic == ArithmeticLlamaCpp {
		if err := checkLlamaCppSource(ck, string(opts.DType)); err != nil {
			return nil, llamaCppRefusal(err)
		}
	}
	set, err := shards.Ensure(ctx, ck, shards.SplitOptions{Out: opts.ShardDir, Progress: opts.SplitProgress})
	if err != nil {
		return nil, err
	}
	// Another process may re-split this folder while this one runs (the checkpoint changed): read the files as
	// they are now.
	if err := set.Pin(); err != nil {
		return nil, err
	}
	return set, nil
}

// OpenCheckpoint opens a source model: a GGUF file (its tensors as they are, its metadata mapped by package
// gguf) or a Hugging Face checkpoint folder. A file named .gguf is read as one whatever it holds, so that an empty
// or cut one is refused for what it is.
func OpenCheckpoint(path string) (*checkpoint.Checkpoint, error) {
	if st, err := os.Stat(path); gguf.IsGGUF(path) || err == nil && !st.IsDir() && strings.EqualFold(filepath.Ext(path), ".gguf") {
		return gguf.OpenCheckpoint(path)
	}
	if _, err := os.Stat(filepath.Join(path, "config.json")); err != nil {
		return nil, fmt.Errorf("model %s: neither a shard folder (no %s), a GGUF file nor a checkpoint folder (no config.json)", path, shards.ManifestFile)
	}
	return checkpoint.Open(path)
}
