// Package checkpoint reads Hugging Face checkpoints: config.json, generation_config.json and safetensors
// weights, in a single file or sharded with model.safetensors.index.json.
package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/layerstream/layerstream/internal/bytesize"
)

// Checkpoint is an opened Hugging Face checkpoint folder.
type Checkpoint struct {
	Dir        string
	Config     *Config
	Generation *GenerationConfig
	// Tensors in file order (files in index order, tensors by offset).
	Tensors []TensorInfo
	// Files, when not nil, makes the config, generation config, tokenizer and chat template files of a
	// single-file model (GGUF) from its metadata: a split writes these instead of copying files from Dir. They
	// are made on the first call, which only a split that writes them makes (building a tokenizer is most of the
	// work of opening a GGUF file whose split is current), and kept for later calls.
	Files func() (map[string][]byte, error)
	// OpenFile, when not nil, serves the tensors' files instead of the filesystem: a synthetic model whose bytes
	// are generated as they are read (synth.Quantized). A split tracks no source files for it.
	OpenFile func(name string) (io.ReaderAt, error)
	byName   map[string]int
}

// New makes a checkpoint from tensors found elsewhere than in safetensors files (a GGUF file), with the
// function making the files a split writes in place of Dir's (called at most once; see Checkpoint.Files). It
// checks that tensor names are unique.
func New(dir string, cfg *Config, gen *GenerationConfig, tensors []TensorInfo, files func() (map[string][]byte, error)) (*Checkpoint, error) {
	c := &Checkpoint{Dir: dir, Config: cfg, Generation: gen, Tensors: tensors, Files: sync.OnceValues(files), byName: map[string]int{}}
	for i, t := range tensors {
		if _, dup := c.byName[t.Name]; dup {
			return nil, fmt.Errorf("checkpoint %s: tensor %q appears twice", dir, t.Name)
		}
		c.byName[t.Name] = i
	}
	return c, nil
}

// Open reads the config files and every safetensors header in dir, validating all of them.
func Open(dir string) (*Checkpoint, error) {
	if st, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("checkpoint %s: not a directory", dir)
	}
	cfg, err := LoadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	gen, err := LoadGenerationConfig(filepath.Join(dir, "generation_config.json"))
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	files, err := weightFiles(dir)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{Dir: dir, Config: cfg, Generation: gen, byName: map[string]int{}}
	var skipped, skippedBytes, unread, unreadBytes int64
	unreadLayers := cfg.UnreadLayers()
	pairs := newMXFP4Pairs(cfg.Arch.FusedExperts)
	for _, f := range files {
		infos, err := readHeader(f)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
		for _, t := range infos {
			if slices.ContainsFunc(unreadLayers, func(p string) bool { return strings.HasPrefix(t.Name, p) }) {
				unread, unreadBytes = unread+1, unreadBytes+t.Length
				continue
			}
			name, skip, ok := cfg.Arch.tensorName(t.Name)
			if !ok {
				return nil, fmt.Errorf("checkpoint %s: tensor %q in %s is neither the decoder's (%s) nor known to be image-only (%s): refusing a %s checkpoint laid out in a way layerstream does not know",
					dir, t.Name, filepath.Base(t.File), strings.Join(slices.Sorted(maps.Keys(cfg.Arch.TensorPrefixes)), ", "),
					strings.Join(cfg.Arch.SkippedTensorPrefixes, ", "), cfg.Arch.Name)
			}
			if skip {
				skipped, skippedBytes = skipped+1, skippedBytes+t.Length
				continue
			}
			stored := t.Name
			t.Name = name
			expanded, err := expand(t, cfg, pairs)
			if err != nil {
				return nil, fmt.Errorf("checkpoint %s: %s: %w", dir, filepath.Base(t.File), err)
			}
			for _, t := range expanded {
				cfg.markRotaryPairs(&t)
				if _, dup := c.byName[t.Name]; dup {
					if name != stored {
						return nil, fmt.Errorf("checkpoint %s: tensor %q (in %s) is %q for the decoder, which another tensor already is (both layouts of %s in one checkpoint?)", dir, stored, filepath.Base(t.File), t.Name, cfg.Arch.Name)
					}
					return nil, fmt.Errorf("checkpoint %s: tensor %q appears in more than one file (or as a fused experts tensor and per expert)", dir, t.Name)
				}
				c.byName[t.Name] = len(c.Tensors)
				c.Tensors = append(c.Tensors, t)
			}
		}
	}
	if err := pairs.unpaired(); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if skipped > 0 {
		slog.Info("checkpoint: leaving out the vision tower and projector (text in, text out: images are not supported); they are never read nor split",
			"architecture", cfg.Arch.Name, "tensors", skipped, "bytes", bytesize.Format(skippedBytes),
			"prefixes", strings.Join(cfg.Arch.SkippedTensorPrefixes, " "))
	}
	if unread > 0 {
		slog.Info("checkpoint: leaving out the multi-token-prediction layers, which transformers does not compute either; they are never read nor split",
			"architecture", cfg.Arch.Name, "tensors", unread, "bytes", bytesize.Format(unreadBytes), "prefixes", strings.Join(unreadLayers, " "))
	}
	return c, nil
}

// expand returns the tensors the decoder reads for t (named as the decoder knows it): an MXFP4 pair's per-expert
// tensors once both halves are in (none before), a fused experts tensor's per expert, a matrix of head parts'
// parts (Architecture.HeadParts), else t itself.
func expand(t TensorInfo, cfg *Config, pairs *mxfp4Pairs) ([]TensorInfo, error) {
	expanded, paired, err := pairs.add(t)
	if paired || err != nil {
		return expanded, err
	}
	expanded, err = expandFused(t, cfg.Arch.FusedExperts)
	if err == nil && len(expanded) == 1 && cfg.Arch.HeadParts != nil {
		expanded, err = expandHeadParts(expanded[0], cfg.Arch.HeadParts(cfg))
	}
	return expanded, err
}

// tensorName is a checkpoint tensor's name as the decoder knows it (Architecture.TensorPrefixes), and whether
// the decoder does not read it (Architecture.SkippedTensorPrefixes). ok is false for a tensor under neither,
// where the Architecture gives TensorPrefixes (a wrapper's decoder is only ever under them).
func (a Architecture) tensorName(name string) (decoderName string, skip, ok bool) {
	for _, p := range a.SkippedTensorPrefixes {
		if strings.HasPrefix(name, p) {
			return name, true, true
		}
	}
	for from, to := range a.TensorPrefixes {
		if rest, found := strings.CutPrefix(name, from); found {
			return to + rest, false, true
		}
	}
	return name, false, len(a.TensorPrefixes) == 0
}

// IndexFile is the name of the sharded-checkpoint index.
const IndexFile = "model.safetensors.index.json"

// weightFiles returns the safetensors files of dir: those named by the index, or model.safetensors.
func weightFiles(dir string) ([]string, error) {
	idxPath := filepath.Join(dir, IndexFile)
	b, err := os.ReadFile(idxPath)
	if errors.Is(err, os.ErrNotExist) {
		single := filepath.Join(dir, "model.safetensors")
		if _, err := os.Stat(single); err != nil {
			return nil, fmt.Errorf("checkpoint %s: no model.safetensors and no %s", dir, IndexFile)
		}
		return []string{single}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("checkpoint %s: malformed JSON: %w", idxPath, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("checkpoint %s: empty weight_map", idxPath)
	}
	var names []string
	for _, f := range idx.WeightMap {
		if f != filepath.Base(f) {
			return nil, fmt.Errorf("checkpoint %s: weight file %q must be a plain file name", idxPath, f)
		}
		if !slices.Contains(names, f) {
			names = append(names, f)
		}
	}
	slices.Sort(names)
	paths := make([]string, len(names))
	for i, n := range names {
		paths[i] = filepath.Join(dir, n)
	}
	return paths, nil
}

func readHeader(path string) ([]TensorInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return ParseSafetensors(f, st.Size(), path)
}

// Tensor returns the named tensor's location.
func (c *Checkpoint) Tensor(name string) (TensorInfo, bool) {
	i, ok := c.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return c.Tensors[i], true
}

// ReadTensor reads the named tensor's raw bytes into dst, which must be exactly Length bytes long.
func (c *Checkpoint) ReadTensor(name string, dst []byte) error {
	t, ok := c.Tensor(name)
	if !ok {
		return fmt.Errorf("checkpoint %s: no tensor %q", c.Dir, name)
	}
	return ReadTensorAt(t, dst)
}

// ReadTensorAt reads t's values from its file into dst (len(dst) must equal t.Length): its stored bytes,
// reordered or gathered as t says (TensorInfo.Values).
func ReadTensorAt(t TensorInfo, dst []byte) error {
	if int64(len(dst)) != t.Length {
		return fmt.Errorf("tensor %q: buffer is %d bytes, tensor is %d", t.Name, len(dst), t.Length)
	}
	f, err := os.Open(t.File)
	if err != nil {
		return fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	defer f.Close()
	stored, out := dst, dst
	if t.Rows != nil {
		stored = nil
	}
	v, err := ReadValues(f, t, &stored, &out)
	if err != nil {
		return err
	}
	copy(dst, v) // a no-op unless gathered
	return nil
}

// UninterleaveRotaryRows reorders the rows of b (a tensor of the given shape, rows along the first dimension)
// from llama.cpp's interleaved rotary layout (within each head the rotary pairs are adjacent rows 2i, 2i+1) to
// Hugging Face's rotate-half layout (pair i is rows i and i + headDim/2): the inverse of the permutation in
// llama.cpp's convert_hf_to_gguf.py (LlamaModel.permute).
func UninterleaveRotaryRows(b []byte, shape []int64, heads int) error {
	if len(shape) == 0 || shape[0] <= 0 || heads <= 0 || shape[0]%int64(heads) != 0 || (shape[0]/int64(heads))%2 != 0 {
		return fmt.Errorf("cannot undo the interleaved rotary row order: shape %v over %d heads (rows must split into heads of an even size)", shape, heads)
	}
	rows := int(shape[0])
	if len(b)%rows != 0 {
		return fmt.Errorf("cannot undo the interleaved rotary row order: %d bytes are not %d whole rows", len(b), rows)
	}
	rb, hd := len(b)/rows, rows/heads
	src := slices.Clone(b)
	for h := range heads {
		for i := range hd / 2 {
			for t := range 2 {
				from := (h*hd + 2*i + t) * rb
				to := (h*hd + t*hd/2 + i) * rb
				copy(b[to:to+rb], src[from:from+rb])
			}
		}
	}
	return nil
}

// ReadF32 reads the named tensor and converts it to float32.
func (c *Checkpoint) ReadF32(name string) ([]float32, error) {
	t, ok := c.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("checkpoint %s: no tensor %q", c.Dir, name)
	}
	raw := make([]byte, t.Length)
	if err := ReadTensorAt(t, raw); err != nil {
		return nil, err
	}
	out := make([]float32, t.NumElements())
	if err := ToF32(out, raw, t.DType); err != nil {
		return nil, fmt.Errorf("tensor %q: %w", name, err)
	}
	return out, nil
}
