package synth

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/quant"
)

// Quantized returns the synthetic model as a checkpoint in dir whose tensors are generated as they are read,
// to be split straight into a shard folder (shards.Split with Out dir) without a checkpoint on disk: the tensors
// target stores block-quantized (under shards.Quantization.Target, the decoder-layer matrices) are generated as
// random blocks of their type, scaled so that the weights spread like N(0, Std), and the others (embeddings,
// norms, lm_head under q8/q4) as in Write. Nothing is quantized, so a split of it runs at the disk's write rate:
// a Llama-3-70B shape, 140 GB as a bf16 checkpoint, is written as 40 GB of q4 shards directly. The bytes depend
// only on the options.
func Quantized(dir string, opts Options, target func(checkpoint.TensorInfo) checkpoint.DType) (*checkpoint.Checkpoint, error) {
	if err := opts.fillDefaults(); err != nil {
		return nil, err
	}
	if opts.Shape.GptOss != nil {
		return nil, fmt.Errorf("synth: a gpt-oss shape is written with its experts in MXFP4 as published, not quantized (no --quantize)")
	}
	cfgJSON, err := json.Marshal(opts.config())
	if err != nil {
		return nil, err
	}
	cfg, err := checkpoint.ParseConfig(cfgJSON)
	if err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	genJSON, err := json.Marshal(map[string]any{"bos_token_id": opts.Shape.BOSTokenID, "eos_token_id": opts.Shape.EOSTokenID})
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{"config.json": cfgJSON, "generation_config.json": genJSON}
	if opts.Tokenizer != "" {
		for name, src := range map[string]string{"tokenizer.json": opts.Tokenizer,
			"tokenizer_config.json": filepath.Join(filepath.Dir(opts.Tokenizer), "tokenizer_config.json")} {
			b, err := os.ReadFile(src)
			if err != nil && name == "tokenizer.json" {
				return nil, fmt.Errorf("synth: tokenizer: %w", err)
			}
			if err == nil {
				files[name] = b
			}
		}
	}
	specs := headParts(opts.tensors(), cfg)
	readers := map[string]*tensorReader{}
	var infos []checkpoint.TensorInfo
	for _, t := range specs {
		ti := checkpoint.TensorInfo{Name: t.name, DType: opts.DType, Shape: t.shape, File: t.name,
			Length: t.elems() * int64(opts.DType.Size())}
		if dt := target(ti); dt != ti.DType {
			ti.DType = dt
			if ti.Length, err = dt.TensorBytes(t.shape); err != nil {
				return nil, fmt.Errorf("synth: %s: %w", t.name, err)
			}
		}
		qt, _ := ti.DType.Quant()
		f, _ := qt.Format()
		readers[t.name] = &tensorReader{spec: t, format: f, seed: nameSeed(opts.Seed, t.name), std: opts.Std * t.scale, size: ti.Length}
		infos = append(infos, ti)
	}
	ck, err := checkpoint.New(dir, cfg, &checkpoint.GenerationConfig{}, infos, func() (map[string][]byte, error) { return files, nil })
	if err != nil {
		return nil, err
	}
	ck.OpenFile = func(name string) (io.ReaderAt, error) {
		r, ok := readers[name]
		if !ok {
			return nil, fmt.Errorf("synth: no tensor %q", name)
		}
		return r, nil
	}
	return ck, nil
}

// tensorReader generates one tensor's bytes at any offset: unit i (an element of a float type, a block of a
// quantized one) from its own PRNG stream (seed, i).
type tensorReader struct {
	spec   tensorSpec
	format quant.Format
	seed   uint64
	std    float64
	size   int64
}

// ReadAt fills p with the tensor's bytes from off.
func (r *tensorReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > r.size {
		return 0, io.EOF
	}
	ub := int64(r.format.BlockBytes)
	var unit [512]byte
	n := 0
	for n < len(p) {
		pos := off + int64(n)
		i := pos / ub
		u := unit[:ub]
		r.unit(u, i)
		n += copy(p[n:], u[pos-i*ub:])
	}
	return n, nil
}

// splitmix64 is the PRNG step: a counter-based stream, so any unit is generated without its predecessors.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// unit writes unit i of the tensor into u.
func (r *tensorReader) unit(u []byte, i int64) {
	s := splitmix64(r.seed ^ uint64(i)*0x9e3779b97f4a7c15)
	next := func() uint64 { s = splitmix64(s); return s }
	// uniform in [-√3·std, √3·std): the spread of N(0, std)
	uni := func() float32 { return float32((float64(next()>>11)/(1<<53)*2 - 1) * math.Sqrt(3) * r.std) }
	half := func(off int, v float64) { binary.LittleEndian.PutUint16(u[off:], quant.Float32ToHalf(float32(v))) }
	switch r.format.Type {
	case quant.F32:
		v := float32(1)
		if !r.spec.ones {
			v = uni()
		}
		binary.LittleEndian.PutUint32(u, math.Float32bits(v))
		return
	case quant.BF16:
		v := float32(1)
		if !r.spec.ones {
			v = uni()
		}
		binary.LittleEndian.PutUint16(u, checkpoint.Float32ToBF16Bits(v))
		return
	}
	for k := 0; k < len(u); k += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], next())
		copy(u[k:], w[:])
	}
	// The scales, so that the dequantized weights spread about as N(0, std): random codes times a scale over
	// the codes' spread, and minimums centring them.
	switch r.format.Type {
	case quant.Q8_0: // q uniform in -128..127: σ ≈ 74
		half(0, r.std/74)
	case quant.Q4_0: // q-8 in -8..7: σ ≈ 4.6
		half(0, r.std/4.6)
	case quant.Q4_1: // q in 0..15: σ ≈ 4.6, mean 7.5
		half(0, r.std/4.6)
		half(2, -7.5*r.std/4.6)
	case quant.Q4_K: // w = d·sc·q - dmin·m, sc and m uniform in 0..63, q in 0..15: with dmin = 7.5·d the mean
		// is 0 and σ(w) = 258.3·d
		d := r.std / 258.3
		half(0, d)
		half(2, 7.5*d)
	default:
		panic(fmt.Sprintf("synth: no generator for %s blocks", r.format.Type))
	}
}

// headParts replaces the specs of matrices that checkpoint.Open cuts into parts head by head
// (checkpoint.Architecture.HeadParts: DeepSeek-V3's kv_b_proj) by their parts, as the split would store them:
// the tensors are random, so there is nothing to reorder.
func headParts(specs []tensorSpec, cfg *checkpoint.Config) []tensorSpec {
	if cfg.Arch.HeadParts == nil {
		return specs
	}
	parts := cfg.Arch.HeadParts(cfg)
	var out []tensorSpec
	for _, t := range specs {
		i := slices.IndexFunc(parts, func(p checkpoint.HeadParts) bool { return strings.HasSuffix(t.name, "."+p.Name) })
		if i < 0 || len(t.shape) != 2 {
			out = append(out, t)
			continue
		}
		prefix, cols := strings.TrimSuffix(t.name, parts[i].Name), t.shape[1]
		for _, q := range parts[i].Parts {
			shape := []int64{int64(parts[i].Heads * q.Rows), cols}
			if q.Transposed {
				shape = []int64{int64(parts[i].Heads) * cols, int64(q.Rows)}
			}
			out = append(out, tensorSpec{name: prefix + q.Name, shape: shape, scale: t.scale})
		}
	}
	return out
}
