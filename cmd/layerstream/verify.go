package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/reference"
	"github.com/layerstream/layerstream/shards"
	"github.com/layerstream/layerstream/tokenizer"
)

func init() {
	register(command{
		name:    "verify",
		summary: "check the engine against a float64 reference: one forward pass streamed, resident and in plain Go",
		usage:   "--model DIR (--prompt TEXT | --ids 1,2,3)",
		setup: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			var o verifyOptions
			fs.StringVar(&o.model, "model", "", "Hugging Face checkpoint folder (required; the reference reads its safetensors)")
			ids := fs.String("ids", "", "comma-separated token ids to run, e.g. 1,403,407,261,378")
			prompt := fs.String("prompt", "", "text to run, encoded with the model's tokenizer.json (instead of --ids)")
			fs.StringVar(&o.dtype, "dtype", "auto", "engine compute dtype: auto, f32 or bf16 (sets the tolerance)")
			fs.StringVar(&o.shardDir, "shards", "", "where the engine splits the checkpoint and streams from (default: the engine's)")
			fs.BoolVar(&o.perLayer, "per-layer", false, "also compare the logits after every decoder layer (runs "+
				"the engine once per depth on a truncated copy of the config: slow for deep models)")
			fs.Float64Var(&o.atol, "atol", 0, "override the absolute logit tolerance (default 1e-4 for f32, unchecked for bf16)")
			fs.Float64Var(&o.minCos, "min-cos", 0, "override the cosine tolerance (default 0.99999 for f32, 0.99 for bf16)")
			return func(ctx context.Context, args []string) error {
				if len(args) != 0 {
					return usageErrorf("unexpected arguments %q", args)
				}
				if o.model == "" {
					return usageErrorf("--model is required")
				}
				var err error
				switch {
				case *prompt != "" && *ids != "":
					return usageErrorf("give --prompt or --ids, not both")
				case *prompt != "":
					tok, err := tokenizer.Load(o.model)
					if err != nil {
						return err
					}
					if o.ids, err = tok.Encode(*prompt, true); err != nil {
						return fmt.Errorf("--prompt: %w", err)
					}
				default:
					if o.ids, err = parseIDs(*ids); err != nil {
						return usageErrorf("%v", err)
					}
				}
				return runVerify(ctx, o, os.Stdout)
			}
		},
	})
}

// verifyOptions are verify's flags.
type verifyOptions struct {
	model        string
	ids          []int
	dtype        string
	shardDir     string
	perLayer     bool
	atol, minCos float64
}

// parseIDs reads "1,2, 3" into token ids.
func parseIDs(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("--prompt or --ids is required")
	}
	var ids []int
	for f := range strings.SplitSeq(s, ",") {
		id, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || id < 0 {
			return nil, fmt.Errorf("--ids: %q is not a token id", strings.TrimSpace(f))
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// runVerify computes the reference, runs the engine streamed and resident, prints the comparison table to w and
// returns an error when any comparison is beyond its tolerance.
func runVerify(ctx context.Context, o verifyOptions, w io.Writer) error {
	ck, err := checkpoint.Open(o.model)
	if err != nil {
		if shards.IsSet(o.model) {
			return fmt.Errorf("verify needs the Hugging Face checkpoint folder, whose safetensors the reference reads; %s is a shard folder (pass the checkpoint it was split from, and --shards %s)", o.model, o.model)
		}
		return err
	}
	// The engine applies the same policy (and logs it); verify needs the choice for the tolerance.
	choice, err := guard.ChooseDType(o.dtype, ck.Config.TorchDType, guard.CPU)
	if err != nil {
		return err
	}
	engDType := map[checkpoint.DType]string{checkpoint.F32: "f32", checkpoint.BF16: "bf16", checkpoint.F16: "f16"}[choice.DType]
	logitTol := reference.LogitTolerance(choice.DType)
	if o.atol > 0 {
		logitTol.MaxAbs = o.atol
	}
	if o.minCos > 0 {
		logitTol.MinCosine = o.minCos
	}

	ref, err := reference.ForwardContext(ctx, ck, o.ids)
	if err != nil {
		return err
	}
	eopts := engine.Options{DType: engDType, ShardDir: o.shardDir}
	streamed, err := engineLogits(ctx, o.model, eopts, o.ids)
	if err != nil {
		return fmt.Errorf("engine (streamed): %w", err)
	}
	eopts.Resident = true
	resident, err := engineLogits(ctx, o.model, eopts, o.ids)
	if err != nil {
		return fmt.Errorf("engine (resident): %w", err)
	}

	var diffs []reference.Diff
	if o.perLayer {
		// The engine offers only logits, so layer k is compared through the logits of the model cut after layer k.
		for k := 1; k < ck.Config.NumHiddenLayers; k++ {
			want, err := reference.HeadLogits(ck, ref.Hidden[k-1])
			if err != nil {
				return err
			}
			got, err := truncatedLogits(ctx, ck, k, engine.Options{DType: engDType}, o.ids)
			if err != nil {
				return fmt.Errorf("engine (first %d layers): %w", k, err)
			}
			d, err := reference.Compare(fmt.Sprintf("layer.%d", k-1), "streamed vs reference", got, want, logitTol)
			if err != nil {
				return err
			}
			diffs = append(diffs, d)
		}
	}
	// Streaming must not change the computation: streamed and resident agree to float32 rounding.
	same := reference.Tolerance{MaxAbs: 1e-5, MinCosine: 0.999999}
	for _, c := range []struct {
		against string
		got     [][]float32
		tol     reference.Tolerance
	}{{"streamed vs reference", streamed, logitTol}, {"resident vs reference", resident, logitTol}} {
		d, err := reference.Compare("logits", c.against, c.got, ref.Logits, c.tol)
		if err != nil {
			return err
		}
		diffs = append(diffs, d)
	}
	d, err := reference.Compare("logits", "streamed vs resident", streamed, resident, same)
	if err != nil {
		return err
	}
	diffs = append(diffs, d)

	// The health checks see the engine's logits too, so a NaN names its likely causes.
	mon := guard.NewMonitor(guard.MonitorOptions{})
	for p, row := range streamed {
		_ = mon.CheckLogits(p, row) // non-strict: warns once per kind, never fails
	}

	fmt.Fprintf(w, "verify %s: %d tokens, dtype %s (%s)\n", o.model, len(o.ids), choice.DType, choice.Reason)
	fmt.Fprintf(w, "tolerance: logits %s; streamed vs resident %s\n", logitTol, same)
	if !o.perLayer {
		fmt.Fprintln(w, "per-layer: the engine returns logits only; --per-layer compares the logits after each layer")
	}
	ok, err := reference.WriteTable(w, diffs)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("the engine disagrees with the reference beyond tolerance (see %s)", guard.Anchor(guard.SectionVerifyMismatch))
	}
	return nil
}

// engineLogits opens the model with opts, runs one forward pass and closes it.
func engineLogits(ctx context.Context, model string, opts engine.Options, ids []int) ([][]float32, error) {
	e, err := engine.Open(ctx, model, opts)
	if err != nil {
		return nil, err
	}
	logits, err := e.Logits(ctx, ids)
	return logits, errors.Join(err, e.Close())
}

// truncatedLogits runs the engine on the model cut after its first k layers: a temporary checkpoint holding
// config.json with num_hidden_layers k, the other small files, and one safetensors file with the embedding, the
// first k layers, the final norm and lm_head.
func truncatedLogits(ctx context.Context, ck *checkpoint.Checkpoint, k int, opts engine.Options, ids []int) ([][]float32, error) {
	tmp, err := os.MkdirTemp("", "layerstream-verify-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := writeTruncated(ck, k, tmp); err != nil {
		return nil, fmt.Errorf("truncated copy of %s: %w", ck.Dir, err)
	}
	return engineLogits(ctx, tmp, opts, ids)
}

// writeTruncated writes the first k layers of ck as a checkpoint in dir.
func writeTruncated(ck *checkpoint.Checkpoint, k int, dir string) error {
	b, err := os.ReadFile(filepath.Join(ck.Dir, "config.json"))
	if err != nil {
		return err
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("config.json: %w", err)
	}
	cfg["num_hidden_layers"] = k
	if b, err = json.Marshal(cfg); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		return err
	}
	for _, name := range []string{"generation_config.json", "tokenizer.json", "tokenizer_config.json"} {
		if b, err := os.ReadFile(filepath.Join(ck.Dir, name)); err == nil {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				return err
			}
		}
	}
	var keep []checkpoint.TensorInfo
	for _, t := range ck.Tensors {
		var layer int
		if n, _ := fmt.Sscanf(t.Name, "model.layers.%d.", &layer); n == 1 && layer >= k {
			continue
		}
		keep = append(keep, t)
	}
	// safetensors: an 8-byte little-endian header length, the JSON header (padded to 8 bytes), then the data.
	header := map[string]any{}
	var off int64
	for _, t := range keep {
		header[t.Name] = map[string]any{"dtype": t.DType, "shape": t.Shape, "data_offsets": []int64{off, off + t.Length}}
		off += t.Length
	}
	hdr, err := json.Marshal(header)
	if err != nil {
		return err
	}
	for len(hdr)%8 != 0 {
		hdr = append(hdr, ' ')
	}
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	werr := binary.Write(w, binary.LittleEndian, uint64(len(hdr)))
	if werr == nil {
		_, werr = w.Write(hdr)
	}
	for _, t := range keep {
		if werr != nil {
			break
		}
		data := make([]byte, t.Length)
		if werr = checkpoint.ReadTensorAt(t, data); werr == nil {
			_, werr = w.Write(data)
		}
	}
	if werr == nil {
		werr = w.Flush()
	}
	return errors.Join(werr, f.Close())
}
