package shards

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine/model"
	"github.com/layerstream/layerstream/imatrix"
	"github.com/layerstream/layerstream/internal/atomicfile"
	"github.com/layerstream/layerstream/internal/bytesize"
	"github.com/layerstream/layerstream/internal/filelock"
	"github.com/layerstream/layerstream/internal/grow"
)

// SplitOptions configure Split.
type SplitOptions struct {
	// Out is the output folder; empty means DefaultDir(ck.Dir).
	Out string
	// Encoding stores tensors raw (default) or compressed; a tensor that does not shrink is stored raw.
	Encoding Encoding
	// Quantize stores weight matrices block-quantized (see Quantization); None keeps every dtype.
	Quantize Quantization
	// Importance weights the error the quantizers minimize by the mean squared inputs of each column (package
	// imatrix): Q8_0's scale search, and Q4_K's and Q4_1's as ggml's encoders given an importance matrix. A
	// matrix without an entry is quantized unweighted, with a warning. The split keeps a copy (ImatrixFile) and records its hash: quantizing with another matrix, or
	// none, quantizes again.
	Importance *imatrix.Matrix
	// Progress, when set, is called as bytes of tensor data are processed (units already split count as done).
	Progress func(done, total int64)
	// DiskRate is the rate, in bytes per second, at which the shards will be read: an encoded tensor whose
	// decoding on all cores (measured at split time) is slower than that is stored raw, since reading it raw
	// would take less time than decoding it. Zero measures the output folder's O_DIRECT read rate (see
	// MeasureReadRate); negative keeps every tensor that shrinks.
	DiskRate float64
}

// CopiedFiles are the checkpoint files Split copies into the shard folder, so the folder is self-contained
// (recent transformers keep the chat template in chat_template.jinja instead of tokenizer_config.json, and
// vision-language processors in chat_template.json). A file
// the checkpoint lacks is removed from the shard folder, so a re-split never keeps a stale copy.
var CopiedFiles = []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "chat_template.json"}

// testHookDecodeRate, when set by tests, replaces the decode rate a split measures (fast: without Huffman codes).
var testHookDecodeRate func(fast bool) float64

// testHookWriter, when set by tests, wraps the writer of every shard file (to inject failures).
var testHookWriter func(io.Writer) io.Writer

// unitPlan is a unit to write: its name and source tensors, in the order written.
type unitPlan struct {
	name    string
	layer   int
	tensors []checkpoint.TensorInfo
	// experts maps a routed expert's tensor (by its full name) to its expert (TensorInfo.Expert); others are absent.
	experts map[string]int
}

// expert is the routed expert of source tensor t (NoExpert: none).
func (p unitPlan) expert(t string) int {
	if e, ok := p.experts[t]; ok {
		return e
	}
	return NoExpert
}

// withExperts records the plan's experts in ts (a unit's tensors, as written).
func (p unitPlan) withExperts(ts []TensorInfo) []TensorInfo {
	out := make([]TensorInfo, len(ts))
	for i, t := range ts {
		out[i] = t.WithExpert(p.expert(t.Name))
	}
	return out
}

func (p unitPlan) file() string { return p.name + ".shard" }

func (p unitPlan) bytes() int64 {
	var n int64
	for _, t := range p.tensors {
		n += t.Length
	}
	return n
}

// unitOf maps a Hugging Face tensor name to its unit.
func unitOf(tensor string) (unit string, layer int, ok bool) {
	switch {
	case strings.HasPrefix(tensor, "model.embed_tokens."), isPerLayerInput(tensor):
		return "embed", -1, true
	case strings.HasPrefix(tensor, "model.norm."):
		return "norm", -1, true
	case strings.HasPrefix(tensor, "lm_head."):
		return "lm_head", -1, true
	}
	rest, found := strings.CutPrefix(tensor, "model.layers.")
	if !found {
		return "", 0, false
	}
	num, _, found := strings.Cut(rest, ".")
	n, err := strconv.Atoi(num)
	if !found || err != nil || n < 0 || strconv.Itoa(n) != num {
		return "", 0, false
	}
	return "layer." + num, n, true
}

// perLayerInputs are the tensors of Gemma 4's per-layer inputs, computed with the embedding: the embedding unit
// holds them.
var perLayerInputs = []string{"model.embed_tokens_per_layer.", "model.per_layer_model_projection.", "model.per_layer_projection_norm."}

// isPerLayerInput reports whether tensor is one of the per-layer inputs' (perLayerInputs).
func isPerLayerInput(tensor string) bool {
	return slices.ContainsFunc(perLayerInputs, func(p string) bool { return strings.HasPrefix(tensor, p) })
}

// planUnits groups the checkpoint's tensors into units in model order and checks the layers match the config.
func planUnits(ck *checkpoint.Checkpoint) ([]unitPlan, error) {
	byUnit := map[string]*unitPlan{}
	for _, t := range ck.Tensors {
		name, layer, ok := unitOf(t.Name)
		if !ok {
			return nil, fmt.Errorf("shards: tensor %q in %s belongs to no unit (expected model.embed_tokens.*, model.layers.N.*, model.norm.* or lm_head.*)", t.Name, t.File)
		}
		if _, err := checkpoint.ParseDType(string(t.DType)); err != nil {
			return nil, fmt.Errorf("shards: tensor %q: %w", t.Name, err)
		}
		p := byUnit[name]
		if p == nil {
			p = &unitPlan{name: name, layer: layer}
			byUnit[name] = p
		}
		p.tensors = append(p.tensors, t)
	}
	experts := expertTensors(ck.Config)
	for _, p := range byUnit {
		layoutExperts(p, experts)
	}
	if err := checkHeadShapes(ck); err != nil {
		return nil, err
	}
	layers := ck.Config.NumHiddenLayers
	order := []string{"embed"}
	for l := range layers {
		order = append(order, fmt.Sprintf("layer.%d", l))
	}
	order = append(order, "norm", "lm_head")
	var plans []unitPlan
	for _, name := range order {
		p := byUnit[name]
		if p == nil {
			if name == "lm_head" {
				continue
			}
			return nil, fmt.Errorf("shards: checkpoint %s has no tensors for unit %s (config.json's num_hidden_layers: %d)", ck.Dir, name, layers)
		}
		plans = append(plans, *p)
		delete(byUnit, name)
	}
	for name := range byUnit {
		return nil, fmt.Errorf("shards: checkpoint %s has tensors for %s but config.json says num_hidden_layers=%d", ck.Dir, name, layers)
	}
	return plans, nil
}

// expertTensors maps each routed expert's layer tensor, named relative to "model.layers.N.", to its expert, as
// the model definition of cfg binds it (model.WeightSpec.Expert); nil when the engine has no definition for cfg
// (nothing is laid out by expert then).
func expertTensors(cfg *checkpoint.Config) map[string]int {
	arch, err := model.For(cfg)
	if err != nil {
		return nil
	}
	var m map[string]int
	for _, w := range arch.Plan().Weights {
		if e := w.Expert(); e >= 0 {
			if m == nil {
				m = map[string]int{}
			}
			m[w.Name] = e
		}
	}
	return m
}

// layoutExperts orders a layer unit's tensors as its shard lays them out: those of no routed expert first, in
// checkpoint order, then each expert's together (gate, up, down and their biases, in checkpoint order), expert
// by expert, so that one expert is one sequential read (Set.LoadPart); experts maps tensor names relative to the
// layer to experts (expertTensors).
func layoutExperts(p *unitPlan, experts map[string]int) {
	if p.layer < 0 || len(experts) == 0 {
		return
	}
	prefix := fmt.Sprintf("model.layers.%d.", p.layer)
	for _, t := range p.tensors {
		if e, ok := experts[strings.TrimPrefix(t.Name, prefix)]; ok {
			if p.experts == nil {
				p.experts = map[string]int{}
			}
			p.experts[t.Name] = e
		}
	}
	slices.SortStableFunc(p.tensors, func(a, b checkpoint.TensorInfo) int { return p.expert(a.Name) - p.expert(b.Name) })
}

// checkHeadShapes checks the config against the shapes of the embedding, the final norm and the output
// projection before any work, so that a config.json contradicting its weights (a vocab_size of 2^40) is refused
// naming the key and the tensor, rather than after a whole split whose shards the engine cannot load.
func checkHeadShapes(ck *checkpoint.Checkpoint) error {
	c := ck.Config
	v, h := int64(c.VocabSize), int64(c.HiddenSize)
	for _, want := range []struct {
		tensor string
		shape  []int64
		keys   string
	}{
		{"model.embed_tokens.weight", []int64{v, h}, "vocab_size and hidden_size"},
		{"lm_head.weight", []int64{v, h}, "vocab_size and hidden_size"},
		{"model.norm.weight", []int64{h}, "hidden_size"},
	} {
		t, ok := ck.Tensor(want.tensor)
		if !ok || slices.Equal(t.Shape, want.shape) {
			continue
		}
		return fmt.Errorf("shards: checkpoint %s: config.json's %s (%d, %d) contradict the tensor %s of shape %v (in %s): want %v; "+
			"the config does not describe these weights", ck.Dir, want.keys, v, h, want.tensor, t.Shape, t.File, want.shape)
	}
	return nil
}

// Split writes the checkpoint's shards, copies its config and tokenizer files, then writes the manifest with a
// record of the checkpoint's files (Source).
//
// Each shard is written to a temporary file, fsynced and renamed, so an interrupted Split leaves only complete
// shards; running Split again keeps every shard that verifies (its checksums, and the manifest entry if there is
// one) and whose source tensors are unchanged, and rewrites the rest. Whether a unit's tensors changed is known
// from the source record while the files holding them keep their identity; otherwise they are hashed again.
// The manifest is written last: a folder without one is an incomplete split. Split checks the free disk space
// before writing. A second Split (in this or another process) into the same folder waits for the first.
func Split(ctx context.Context, ck *checkpoint.Checkpoint, opts SplitOptions) (*Set, error) {
	out, plans, err := prepare(ck, &opts)
	if err != nil {
		return nil, err
	}
	made, unlock, err := begin(ctx, ck, out)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return splitLocked(ctx, ck, made, out, plans, opts, false)
}

// Ensure returns the split of ck in opts.Out (DefaultDir(ck.Dir) when empty), up to date with the checkpoint:
// it splits on first use, and when the checkpoint changed since (a file's identity differs from the split's
// source record) it splits again the units whose tensors changed and refreshes the copied files, saying so in
// one log line. While nothing changed it costs a stat of each checkpoint file. Unlike Split it does not re-read
// the shards of unchanged units (Load verifies them). A split in progress in another process is waited for.
func Ensure(ctx context.Context, ck *checkpoint.Checkpoint, opts SplitOptions) (*Set, error) {
	out, plans, err := prepare(ck, &opts)
	if err != nil {
		return nil, err
	}
	if set, ok := openUpToDate(out, ck, plans, opts.Quantize, opts.Importance); ok {
		return set, nil
	}
	made, unlock, err := begin(ctx, ck, out)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Another process may have brought the split up to date while this one waited.
	if set, ok := openUpToDate(out, ck, plans, opts.Quantize, opts.Importance); ok {
		return set, nil
	}
	if !IsSet(out) {
		slog.Info("splitting the checkpoint into per-layer shards (first use)", "checkpoint", ck.Dir, "shards", out)
	}
	return splitLocked(ctx, ck, made, out, plans, opts, true)
}

// openUpToDate opens the split in out when it exists and matches ck without hashing anything.
func openUpToDate(out string, ck *checkpoint.Checkpoint, plans []unitPlan, q Quantization, imp *imatrix.Matrix) (*Set, bool) {
	set, err := Open(out)
	if err != nil {
		return nil, false
	}
	ok, why := upToDate(set.source, ck, set.units)
	if enc := q.encoder(imp); ok && set.source.Quantizer != enc {
		ok, why = false, fmt.Sprintf("its tensors were quantized by %q, the split asked for is %q", set.source.Quantizer, enc)
	}
	if ok && len(plans) == len(set.units) {
		for i, p := range plans {
			if !holdsPlan(set.units[i], p, q) {
				ok, why = false, "unit "+p.name+" no longer matches the checkpoint's tensors"
				break
			}
		}
	}
	if !ok {
		slog.Debug("the split needs updating", "shards", out, "reason", why)
		return nil, false
	}
	return set, true
}

// prepare validates opts (filling the default encoding and folder) and plans the units.
func prepare(ck *checkpoint.Checkpoint, opts *SplitOptions) (string, []unitPlan, error) {
	if opts.Encoding == "" {
		opts.Encoding = Raw
	}
	if _, err := ParseEncoding(string(opts.Encoding)); err != nil {
		return "", nil, fmt.Errorf("shards: %w", err)
	}
	if opts.Importance != nil {
		if err := CheckImportance(ck, opts.Quantize, opts.Importance); err != nil {
			return "", nil, fmt.Errorf("shards: %w", err)
		}
	}
	out := opts.Out
	if out == "" {
		out = DefaultDirFor(ck.Dir, opts.Quantize)
	}
	// A checkpoint folder's own files (not one whose files are made from its metadata: a GGUF file's, synth's
	// shards written straight into their folder) must not be mixed with a split's.
	if ck.Files == nil && sameDir(out, ck.Dir) {
		return "", nil, fmt.Errorf("shards: the output folder %s is the checkpoint's own folder: the shards and their copies of "+
			"config.json and the tokenizer's files would mix with the checkpoint's, and the folder would be read as a "+
			"shard folder from then on, no longer following the checkpoint; choose another folder (or none: the "+
			"layerstream cache)", out)
	}
	plans, err := planUnits(ck)
	if err != nil {
		return "", nil, err
	}
	return out, plans, nil
}

// sameDir reports whether a and b are the same existing folder.
func sameDir(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil || !sa.IsDir() {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && os.SameFile(sa, sb)
}

// begin starts writing a split into out: it makes a single-file model's files from its metadata (returned as
// made), so that metadata a split cannot turn into them is refused before any folder exists, then creates the
// folder and takes its lock.
func begin(ctx context.Context, ck *checkpoint.Checkpoint, out string) (made map[string][]byte, unlock func(), err error) {
	if ck.Files != nil {
		if made, err = ck.Files(); err != nil {
			return nil, nil, err
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, nil, fmt.Errorf("shards: %w", err)
	}
	unlock, err = lockSplit(ctx, out)
	return made, unlock, err
}

// lockFile, in a shard folder, is locked by the process splitting into it, and removed when it is done. The
// operating system releases the lock when its holder exits, so a split killed midway never blocks the next one
// (which removes the file it left).
const lockFile = ".split.lock"

func lockSplit(ctx context.Context, out string) (func(), error) {
	unlock, err := filelock.Lock(ctx, filepath.Join(out, lockFile), true, func() {
		slog.Info("waiting for another layerstream process splitting into the same folder", "shards", out)
	})
	if err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	return unlock, nil
}

// splitLocked is Split and Ensure, under the folder's lock; made holds the files begin made. With quick, a unit
// whose source is known unchanged keeps its shard when the file has the size the manifest records, without being
// read.
func splitLocked(ctx context.Context, ck *checkpoint.Checkpoint, made map[string][]byte, out string, plans []unitPlan, opts SplitOptions, quick bool) (*Set, error) {
	removeStaleTemps(out)
	old, prev := previousSplit(out)
	state, err := readSourceState(ck, prev, opts.Quantize.encoder(opts.Importance))
	if err != nil {
		return nil, err
	}
	var total int64
	for _, p := range plans {
		total += p.bytes()
	}
	w := &splitter{ctx: ctx, out: out, enc: opts.Encoding, quant: opts.Quantize, imp: opts.Importance, encoder: state.src.Quantizer, progress: opts.Progress, total: total,
		buf: NewBuffer(0), hasher: newTensorHasher(), open: ck.OpenFile}
	defer w.close()

	r, err := w.reuseAll(plans, old, prev, state, quick)
	if err != nil {
		return nil, err
	}
	if len(r.todo) > 0 {
		if err := w.startWriting(r.need, opts.DiskRate); err != nil {
			return nil, err
		}
	}
	for _, i := range r.todo {
		u, hash, err := w.writeUnit(plans[i])
		if err != nil {
			return nil, err
		}
		r.units[i] = u
		state.src.Units[plans[i].name] = hash
	}
	slog.Debug("split shards", "dir", out, "written", len(r.todo), "kept", len(plans)-len(r.todo))
	if err := w.finish(ck, made, plans, r.units, state.src); err != nil {
		return nil, err
	}
	if len(r.changed) > 0 || len(state.changed) > 0 {
		files := strings.Join(state.changed, ",")
		if files == "" {
			files = "none by size and time (found by the units' contents)"
		}
		slog.Info("the checkpoint changed since it was split: updated the split", "checkpoint", ck.Dir, "shards", out,
			"changed_files", files, "resplit_units", summarize(r.changed),
			"kept_units", len(plans)-len(r.todo))
	}
	return Open(out)
}

// previousSplit reads the folder's manifest, if any: its units by name and its source. An unreadable one is
// ignored (each shard is then checked against its own header).
func previousSplit(out string) (map[string]UnitInfo, *Source) {
	units, prev, err := readManifest(out)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			slog.Warn("ignoring unreadable manifest; every shard is checked against its own header", "err", err)
		}
		return nil, prev
	}
	old := map[string]UnitInfo{}
	for _, u := range units {
		old[u.Name] = u
	}
	return old, prev
}

// reuseResult is what splitLocked keeps of a previous split: the units (those kept filled in), the indexes of
// the plans still to write with their estimated bytes, and the units whose source tensors changed.
type reuseResult struct {
	units   []UnitInfo
	todo    []int
	need    int64
	changed []string
}

// reuseAll keeps the shards that verify and hold the checkpoint's current tensors (splitter.reuse), recording
// their hashes in state, and plans the rest.
func (w *splitter) reuseAll(plans []unitPlan, old map[string]UnitInfo, prev *Source, state *sourceState, quick bool) (reuseResult, error) {
	r := reuseResult{units: make([]UnitInfo, len(plans))}
	for i, p := range plans {
		if err := w.ctx.Err(); err != nil {
			return r, err
		}
		u, hash, keep, srcChanged, err := w.reuse(p, old, prev, state, quick)
		if err != nil {
			return r, err
		}
		if keep {
			r.units[i] = u
			state.src.Units[p.name] = hash
			w.advance(p.bytes())
			continue
		}
		if srcChanged {
			r.changed = append(r.changed, p.name)
		}
		r.todo = append(r.todo, i)
		r.need += estimateSize(p)
	}
	return r, nil
}

// startWriting readies the folder for new shards: room for need bytes, the disk's read rate for encoded tensors
// (diskRate, else measured), and the manifest taken away, as the folder is incomplete while shards change.
func (w *splitter) startWriting(need int64, diskRate float64) error {
	if err := checkFreeSpace(w.out, need); err != nil {
		return err
	}
	if w.diskRate = diskRate; w.diskRate == 0 && w.enc != Raw {
		var err error
		if w.diskRate, err = MeasureReadRate(w.out); err != nil {
			slog.Warn("could not measure the disk's read rate: every encoded tensor that shrinks is kept encoded", "shards", w.out, "err", err)
			w.diskRate = -1
		} else {
			slog.Info("measured the disk's O_DIRECT read rate: encoded tensors that decode slower are stored raw", "shards", w.out,
				"read_rate", bytesize.Format(int64(w.diskRate))+"/s", "cores", runtime.GOMAXPROCS(0))
		}
	}
	if err := os.Remove(filepath.Join(w.out, ManifestFile)); err == nil {
		if err := atomicfile.SyncDir(w.out); err != nil {
			return fmt.Errorf("shards: %w", err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("shards: %w", err)
	}
	return nil
}

// finish completes the folder once every unit's shard is there: the importance matrix, the checkpoint's other
// files, no shard of an unplanned unit, and the manifest last.
func (w *splitter) finish(ck *checkpoint.Checkpoint, made map[string][]byte, plans []unitPlan, units []UnitInfo, src *Source) error {
	if len(w.unweighted) > 0 {
		slog.Warn("the importance matrix has no entry for some matrices: they were quantized unweighted (was it collected on this model?)",
			"matrices", summarize(w.unweighted))
	}
	if err := keepImportance(w.out, w.imp); err != nil {
		return fmt.Errorf("shards: %w", err)
	}
	w.stats.log(w.enc, w.diskRate)
	removeUnplanned(w.out, plans)
	for _, name := range CopiedFiles {
		if err := copyFile(ck, made, name, filepath.Join(w.out, name)); err != nil {
			return fmt.Errorf("shards: copying %s: %w", name, err)
		}
	}
	if err := writeManifest(w.out, units, src); err != nil {
		return fmt.Errorf("shards: writing manifest: %w", err)
	}
	return nil
}

// keepImportance writes the split's importance matrix into its folder (ImatrixFile), or removes a stale one.
func keepImportance(out string, imp *imatrix.Matrix) error {
	path := filepath.Join(out, ImatrixFile)
	if imp == nil {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	return imp.Write(path, map[string]string{"format": "layerstream.imatrix", "note": "the importance matrix this split was quantized with"})
}

// summarize lists names, or the first few and a count when there are many.
func summarize(names []string) string {
	const most = 8
	if len(names) <= most {
		return strings.Join(names, ",")
	}
	return fmt.Sprintf("%s,… (%d in all)", strings.Join(names[:most], ","), len(names))
}

// removeStaleTemps deletes temporary files that a killed Split left behind (a failed write removes its own).
// The caller holds the folder's lock, so no other Split is writing them.
func removeStaleTemps(dir string) {
	for _, pat := range []string{".*.shard.tmp*", "." + ManifestFile + ".tmp*", ".*.json.tmp*", ".*.jinja.tmp*"} {
		names, _ := filepath.Glob(filepath.Join(dir, pat))
		for _, n := range names {
			if err := os.Remove(n); err == nil {
				slog.Debug("removed a temporary file left by an interrupted split", "file", n)
			}
		}
	}
}

// removeUnplanned deletes shard files of units the checkpoint does not have, e.g. layers of an earlier split of
// a deeper model into the same folder.
func removeUnplanned(dir string, plans []unitPlan) {
	names, _ := filepath.Glob(filepath.Join(dir, "*.shard"))
	for _, n := range names {
		if !slices.ContainsFunc(plans, func(p unitPlan) bool { return p.file() == filepath.Base(n) }) {
			if err := os.Remove(n); err == nil {
				slog.Info("removed a shard the checkpoint does not have", "file", n)
			}
		}
	}
}

// estimateSize bounds a unit's shard size: every tensor raw and aligned, plus the header.
func estimateSize(p unitPlan) int64 {
	n := int64(prefixSize + trailerSize)
	for _, t := range p.tensors {
		n += alignUp(t.Length, dataAlign) + 256 + int64(len(t.Name))
	}
	return alignUp(n, pageSize)
}

func checkFreeSpace(dir string, need int64) error {
	avail, err := freeBytes(dir)
	if err != nil {
		return fmt.Errorf("shards: checking free space in %s: %w", dir, err)
	}
	if avail >= 0 && need > avail {
		return fmt.Errorf("shards: not enough free disk space in %s: need %d bytes (%s), %d available (%s)",
			dir, need, bytesize.Format(need), avail, bytesize.Format(avail))
	}
	return nil
}

// splitter holds the state of one Split: reused buffers, open source files and progress.
type splitter struct {
	ctx        context.Context
	out        string
	enc        Encoding
	quant      Quantization
	imp        *imatrix.Matrix // SplitOptions.Importance
	encoder    string          // quant.encoder(imp), computed once (it hashes the matrix)
	unweighted []string        // quantized matrices the importance matrix has no entry for
	progress   func(done, total int64)
	done       int64
	total      int64

	buf   *Buffer // reused for checking existing shards
	chunk []byte  // reused for streaming raw tensors
	raw   []byte  // reused for whole tensors to encode
	part  []byte  // reused for the part of raw a tensor is (checkpoint.TensorInfo.Rows)
	f32   []float32
	qbuf  []byte   // reused for quantized tensors
	coder *encoder // created on first encoded tensor
	dec   *zstd.Decoder
	files map[string]io.ReaderAt
	open  func(name string) (io.ReaderAt, error) // the checkpoint's OpenFile, or nil for the filesystem

	hasher *tensorHasher // the unit's source tensors, as they are copied or fingerprinted

	diskRate float64     // see SplitOptions.DiskRate (measured when it was 0); negative: no limit
	stats    encodeStats // what the encoding did to the tensors written
}

func (w *splitter) close() {
	for _, f := range w.files {
		if c, ok := f.(io.Closer); ok {
			c.Close()
		}
	}
	if w.dec != nil {
		w.dec.Close()
	}
}

// decoder returns a zstd decoder for checking existing shards, created on first use.
func (w *splitter) decoder() (*zstd.Decoder, error) {
	if w.dec == nil {
		d, err := newDecoder()
		if err != nil {
			return nil, err
		}
		w.dec = d
	}
	return w.dec, nil
}

func (w *splitter) advance(n int64) {
	w.done += n
	if w.progress != nil {
		w.progress(w.done, w.total)
	}
}

// reuse decides whether unit p's shard, if the folder has one, can stay. It returns the unit and the hash of its
// source tensors when it can; srcChanged when it cannot because the checkpoint's tensors differ from those the
// shard was made from (not because the shard is missing or damaged). The source tensors are read (hashed) only
// when a shard exists and the record cannot vouch for them.
func (w *splitter) reuse(p unitPlan, old map[string]UnitInfo, prev *Source, st *sourceState, quick bool) (u UnitInfo, hash string, keep, srcChanged bool, err error) {
	fst, err := os.Stat(filepath.Join(w.out, p.file()))
	if err != nil {
		return UnitInfo{}, "", false, false, nil
	}
	if prev != nil && prev.Quantizer != w.encoder && w.quant.quantizes(p) {
		return UnitInfo{}, "", false, false, nil // quantized by another encoder: quantize again
	}
	hash, known := st.unitKnown(p, prev)
	var crcs []uint32
	recorded := ""
	if prev != nil {
		recorded = prev.Units[p.name]
	}
	if !known {
		if hash, crcs, err = w.fingerprint(p); err != nil {
			return UnitInfo{}, "", false, false, err
		}
		if recorded != "" && recorded != hash {
			return UnitInfo{}, "", false, true, nil
		}
	}
	if ou, ok := old[p.name]; quick && known && ok && ou.FileSize == fst.Size() && holdsPlan(ou, p, w.quant) {
		return ou, hash, true, false, nil
	}
	u, ok := w.existing(p, old)
	if !ok {
		return UnitInfo{}, "", false, false, nil
	}
	if recorded == "" && crcs != nil {
		// No hash to compare with (a split made before sources were recorded, or one interrupted before its
		// manifest): the shard's checksums are those of the bytes it was made from.
		for i, t := range u.Tensors {
			if s := p.tensors[i]; t.CRC32C != crcs[i] && t.DType == s.DType && !s.Transformed() {
				return UnitInfo{}, "", false, true, nil
			}
		}
	}
	return u, hash, true, false, nil
}

// fingerprint reads unit p's source tensors and returns the hash the split records for them and each tensor's
// CRC-32C.
func (w *splitter) fingerprint(p unitPlan) (string, []uint32, error) {
	w.hasher.reset()
	w.chunk = grow.Slice(w.chunk, chunkSize)
	crcs := make([]uint32, len(p.tensors))
	for i, t := range p.tensors {
		src, err := w.source(t.File)
		if err != nil {
			return "", nil, fmt.Errorf("shards: %w", err)
		}
		w.hasher.begin(t)
		for _, r := range t.Ranges() { // the stored bytes, in order (an MXFP4 pair's blocks, then its scales)
			for off := int64(0); off < r.Length; off += chunkSize {
				if err := w.ctx.Err(); err != nil {
					return "", nil, err
				}
				b := w.chunk[:min(chunkSize, r.Length-off)]
				if err := readAt(src, b, r.Offset+off, t.File); err != nil {
					return "", nil, fmt.Errorf("shards: %w", err)
				}
				crcs[i] = crc32.Update(crcs[i], castagnoli, b)
				w.hasher.Write(b)
			}
		}
	}
	return w.hasher.sum(), crcs, nil
}

// existing returns the unit already on disk when its shard matches the plan and verifies.
func (w *splitter) existing(p unitPlan, old map[string]UnitInfo) (UnitInfo, bool) {
	path := filepath.Join(w.out, p.file())
	if _, err := os.Stat(path); err != nil {
		return UnitInfo{}, false
	}
	file, err := readWhole(path, w.buf, -1, os.Open)
	if err != nil {
		slog.Info("rewriting shard", "file", path, "reason", err)
		return UnitInfo{}, false
	}
	h, err := parseShard(file, path)
	if err == nil {
		err = matchesPlan(h, p, w.enc, w.quant, w.encoder)
	}
	if err == nil && old != nil {
		if u, ok := old[p.name]; !ok || u.File != p.file() || u.FileSize != h.FileSize || !sameTensors(u.Tensors, h.Tensors) {
			err = fmt.Errorf("does not match %s", ManifestFile)
		}
	}
	if err == nil {
		size := int64(len(file))
		w.buf.ensure(size + decodeSize(h.Tensors))
		_, err = decodeTensors(w.ctx, path, w.buf.b[:size], h, w.buf.b[size:], w.decoder)
	}
	if err != nil {
		slog.Info("rewriting shard", "file", path, "reason", err)
		return UnitInfo{}, false
	}
	slog.Debug("keeping verified shard", "file", path)
	return UnitInfo{Name: p.name, Layer: p.layer, File: p.file(), FileSize: h.FileSize,
		DecodeSize: decodeSize(h.Tensors), Tensors: p.withExperts(h.Tensors)}, true
}

// holdsPlan reports whether u, as the manifest describes it, is unit p's shard file holding p's tensors (names,
// shapes, and the dtypes quantization q stores them as), whatever their encoding.
func holdsPlan(u UnitInfo, p unitPlan, q Quantization) bool {
	return u.Name == p.name && u.File == p.file() && slices.EqualFunc(u.Tensors, p.tensors, func(t TensorInfo, s checkpoint.TensorInfo) bool {
		return plannedAs(t, s, q) == nil && t.Expert() == p.expert(s.Name)
	})
}

// plannedAs checks that shard tensor t is source tensor s stored as quantization q stores it.
func plannedAs(t TensorInfo, s checkpoint.TensorInfo, q Quantization) error {
	want := q.Target(s)
	size, err := want.TensorBytes(s.Shape)
	if err != nil || t.Name != s.Name || t.DType != want || !slices.Equal(t.Shape, s.Shape) || t.Length != size {
		return fmt.Errorf("tensor %q is %s %v, the plan is %q %s %v", t.Name, t.DType, t.Shape, s.Name, want, s.Shape)
	}
	return nil
}

// matchesPlan checks that a parsed shard holds exactly the planned tensors, stored with the asked encoding and
// quantization, those it quantized by encoder.
func matchesPlan(h *shardHeader, p unitPlan, enc Encoding, q Quantization, encoder string) error {
	if h.Unit != p.name || h.Encoding != enc || len(h.Tensors) != len(p.tensors) {
		return fmt.Errorf("shard holds unit %s (%d tensors, encoding %s), want %s (%d tensors, encoding %s)",
			h.Unit, len(h.Tensors), h.Encoding, p.name, len(p.tensors), enc)
	}
	if !q.quantizes(p) {
		encoder = ""
	}
	if h.Quantizer != encoder {
		return fmt.Errorf("shard's tensors were quantized by %q, the split asks for %q", h.Quantizer, encoder)
	}
	for i, t := range h.Tensors {
		if err := plannedAs(t, p.tensors[i], q); err != nil {
			return fmt.Errorf("tensor %d: %w", i, err)
		}
	}
	return nil
}

func (w *splitter) source(path string) (io.ReaderAt, error) {
	if f, ok := w.files[path]; ok {
		return f, nil
	}
	var f io.ReaderAt
	var err error
	if w.open != nil {
		f, err = w.open(path)
	} else {
		f, err = os.Open(path)
	}
	if err != nil {
		return nil, err
	}
	if w.files == nil {
		w.files = map[string]io.ReaderAt{}
	}
	w.files[path] = f
	return f, nil
}

// countWriter counts bytes and writes zero padding.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

var zeros [pageSize]byte

// padTo writes zeros up to the next multiple of align.
func (c *countWriter) padTo(align int64) error {
	_, err := c.Write(zeros[:alignUp(c.n, align)-c.n])
	return err
}

// writeUnit writes one shard file atomically and returns its description and the hash of its source tensors.
func (w *splitter) writeUnit(p unitPlan) (UnitInfo, string, error) {
	path := filepath.Join(w.out, p.file())
	h := &shardHeader{Unit: p.name, Encoding: w.enc}
	if w.quant.quantizes(p) {
		h.Quantizer = w.encoder
	}
	w.hasher.reset()
	err := atomicfile.Write(path, func(dst io.Writer) error {
		if testHookWriter != nil {
			dst = testHookWriter(dst)
		}
		cw := &countWriter{w: dst}
		if _, err := cw.Write(prefix()); err != nil {
			return err
		}
		for _, t := range p.tensors {
			if err := cw.padTo(dataAlign); err != nil {
				return err
			}
			ti, err := w.writeTensor(cw, t)
			if err != nil {
				return fmt.Errorf("tensor %q: %w", t.Name, err)
			}
			h.Tensors = append(h.Tensors, ti)
		}
		tail, err := encodeTail(h, cw.n)
		if err != nil {
			return err
		}
		_, err = cw.Write(tail)
		return err
	})
	if err != nil {
		return UnitInfo{}, "", fmt.Errorf("shards: writing %s: %w", path, err)
	}
	return UnitInfo{Name: p.name, Layer: p.layer, File: p.file(), FileSize: h.FileSize,
		DecodeSize: decodeSize(h.Tensors), Tensors: p.withExperts(h.Tensors)}, w.hasher.sum(), nil
}

const chunkSize = 8 << 20

// writeTensor copies one source tensor into the shard at cw's current (aligned) position.
func (w *splitter) writeTensor(cw *countWriter, t checkpoint.TensorInfo) (TensorInfo, error) {
	ti := TensorInfo{Name: t.Name, DType: t.DType, Shape: t.Shape, Offset: cw.n, Length: t.Length, Encoding: Raw, EncodedLength: t.Length}
	src, err := w.source(t.File)
	if err != nil {
		return ti, err
	}
	w.hasher.begin(t)
	target := w.quant.Target(t)
	if w.enc == Raw && target == t.DType && !t.Transformed() {
		ti.CRC32C, err = w.copyRaw(cw, src, t)
		return ti, err
	}
	if err := w.ctx.Err(); err != nil {
		return ti, err
	}
	w.raw = grow.Slice(w.raw, int(t.StoredLength()))
	at := w.raw
	for _, r := range t.Ranges() {
		if err := readAt(src, at[:r.Length], r.Offset, t.File); err != nil {
			return ti, err
		}
		at = at[r.Length:]
	}
	w.hasher.Write(w.raw) // the source bytes, as fingerprint hashes them
	data, err := t.Values(w.raw, &w.part)
	if err != nil {
		return ti, err
	}
	if target != t.DType {
		imp, missing, err := importanceOf(w.imp, t, target)
		if err != nil {
			return ti, err
		}
		if missing {
			w.unweighted = append(w.unweighted, t.Name)
		}
		if data, err = quantizeTensor(data, t.DType, target, t.Shape, imp, &w.f32, &w.qbuf); err != nil {
			return ti, fmt.Errorf("quantizing to %s: %w", target, err)
		}
		ti.DType, ti.Length, ti.EncodedLength = target, int64(len(data)), int64(len(data))
	}
	ti.CRC32C = crc32c(data)
	if w.enc == Raw {
		if _, err := cw.Write(data); err != nil {
			return ti, err
		}
		w.advance(t.Length)
		return ti, nil
	}
	if w.coder == nil {
		if w.coder, err = newEncoder(w.enc); err != nil {
			return ti, err
		}
	}
	stored, ti, err := w.encodeTensor(ti, data)
	if err != nil {
		return ti, err
	}
	if int64(len(stored)) != ti.EncodedLength {
		return ti, fmt.Errorf("internal error: %d bytes to store for %s, its table entry says %d (%s)", len(stored), ti.Name, ti.EncodedLength, ti.Encoding)
	}
	if _, err := cw.Write(stored); err != nil {
		return ti, err
	}
	w.advance(t.Length)
	return ti, nil
}

// copyRaw streams t's bytes from src into the shard unchanged, in chunks through one reused buffer, and returns
// their CRC-32C.
func (w *splitter) copyRaw(cw *countWriter, src io.ReaderAt, t checkpoint.TensorInfo) (uint32, error) {
	w.chunk = grow.Slice(w.chunk, chunkSize)
	var crc uint32
	for off := int64(0); off < t.Length; off += chunkSize {
		if err := w.ctx.Err(); err != nil {
			return 0, err
		}
		b := w.chunk[:min(chunkSize, t.Length-off)]
		if err := readAt(src, b, t.Offset+off, t.File); err != nil {
			return 0, err
		}
		crc = crc32.Update(crc, castagnoli, b)
		w.hasher.Write(b)
		if _, err := cw.Write(b); err != nil {
			return 0, err
		}
		w.advance(int64(len(b)))
	}
	return crc, nil
}

// decodeShare is the share of the cores' time that decoding may take while the disk reads a layer: the rest is
// left to compute and to other work. A tensor whose decoding would take more is stored raw.
const decodeShare = 0.5

// encodeTensor encodes the tensor ti, whose bytes are data, and returns the bytes to store and ti filled in.
// Each encoded tensor is decoded once, timed (which also checks that it decodes back to data): when decoding
// on all cores takes more than decodeShare of the time the disk takes to read the tensor raw, planes tries
// again without Huffman codes, and a tensor still too slow is stored raw, since reading it raw is faster.
func (w *splitter) encodeTensor(ti TensorInfo, data []byte) ([]byte, TensorInfo, error) {
	cores := float64(runtime.GOMAXPROCS(0))
	for _, fast := range []bool{false, true} {
		stored, frames, enc, err := w.coder.encode(data, w.enc, shuffleWidth(ti.DType), fast)
		if err != nil {
			return nil, ti, err
		}
		if enc == Raw {
			if fast {
				break // the Huffman planes were too slow and 4-bit codes do not shrink it: raw, as too slow
			}
			w.stats.incompressible.add(ti.Length, ti.Length)
			ti.Encoding, ti.EncodedLength, ti.Frames = Raw, ti.Length, nil
			return data, ti, nil
		}
		ti.Encoding, ti.EncodedLength, ti.Frames = enc, int64(len(stored)), slices.Clone(frames)
		rate, err := w.coder.decodeRate(ti, stored, data, w.decoder)
		if err != nil {
			return nil, ti, err
		}
		if testHookDecodeRate != nil {
			rate = testHookDecodeRate(fast)
		}
		if w.diskRate <= 0 || rate*cores*decodeShare >= w.diskRate {
			w.stats.encoded.add(ti.Length, ti.EncodedLength)
			w.stats.decodeSeconds += float64(ti.Length) / rate
			return stored, ti, nil
		}
		slog.Debug("decoding is slower than reading raw", "tensor", ti.Name, "encoding", enc, "fast", fast,
			"decode_rate", bytesize.Format(int64(rate))+"/s per core", "read_rate", bytesize.Format(int64(w.diskRate))+"/s")
		if w.enc != Planes {
			break
		}
	}
	w.stats.slow.add(ti.Length, ti.Length)
	ti.Encoding, ti.EncodedLength, ti.Frames = Raw, ti.Length, nil
	return data, ti, nil
}

func readAt(f io.ReaderAt, b []byte, off int64, name string) error {
	if _, err := f.ReadAt(b, off); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("reading %s at %d: %w", name, off, err)
	}
	return nil
}

// copyFile writes the checkpoint's file name to dst: the one made from a single-file model's metadata (GGUF
// input: made holds them all), else a copy of Dir's.
func copyFile(ck *checkpoint.Checkpoint, made map[string][]byte, name, dst string) error {
	if ck.Files == nil {
		return copyIfPresent(filepath.Join(ck.Dir, name), dst)
	}
	b, ok := made[name]
	if !ok {
		if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	return atomicfile.Write(dst, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// copyIfPresent copies src to dst atomically; when src does not exist it removes dst.
func copyIfPresent(src, dst string) error {
	in, err := os.Open(src)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	if err != nil {
		return err
	}
	defer in.Close()
	return atomicfile.Write(dst, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}
