package engine

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"time"
	"unsafe"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine/kernels"
	"github.com/layerstream/layerstream/engine/model"
	"github.com/layerstream/layerstream/profiler"
	"github.com/layerstream/layerstream/shards"
)

// deviceTensor is a tensor in a device buffer and the host memory the transfer stage writes it through.
//
// Where the backend shares host memory with the device (simplego, XLA's CPU plugin) flat is the device buffer
// itself: filling it is the host→device transfer, with no further copy at execution. Where it does not (CUDA),
// flat is a host staging buffer and upload copies it into a new device buffer (BufferFromFlatData).
type deviceTensor struct {
	t *tensors.Tensor
	// flat is []float32 or []bfloat16.BFloat16: the shared buffer, or the staging buffer. A weight tensor copied
	// to the device straight from the shard buffer (weightSet.fill) has none: nil.
	flat  any
	shape shapes.Shape
	// copyTo is the backend upload copies flat to; nil for a shared buffer.
	copyTo backends.Backend
	// name is the checkpoint tensor a host view holds (alias sets it), for Options.ObserveInputs.
	name string
}

func newDeviceTensor(b backends.Backend, dt dtypes.DType, dims ...int) (*deviceTensor, error) {
	shape := shapes.Make(dt, dims...)
	if !b.HasSharedBuffers() {
		if dt != dtypes.Float32 && dt != dtypes.BFloat16 {
			return nil, fmt.Errorf("device buffer %s%v: unsupported dtype", dt, dims)
		}
		d := &deviceTensor{shape: shape, copyTo: b}
		// Allocated (zeros) now, so that the device budget fails at Open rather than mid-generation.
		if err := d.upload(); err != nil {
			return nil, err
		}
		return d, nil
	}
	buf, flat, err := b.NewSharedBuffer(0, shape)
	if err != nil {
		return nil, fmt.Errorf("device buffer %s%v: %w", dt, dims, err)
	}
	t, err := tensors.FromBuffer(b, buf)
	if err != nil {
		return nil, fmt.Errorf("device buffer %s%v: %w", dt, dims, err)
	}
	return &deviceTensor{t: t, flat: flat, shape: shape}, nil
}

// upload makes the device buffer hold flat's current contents: a no-op for a shared buffer, else a copy into a
// new device buffer that replaces the previous one (freed first, so a set never holds two copies). The copy has
// completed when it returns (go-xla waits for the transfer), so flat may be rewritten at once.
func (d *deviceTensor) upload() error {
	if d.copyTo == nil {
		return nil
	}
	return d.uploadFrom(d.host())
}

// host returns flat, allocating the staging buffer of a copied tensor that has none.
func (d *deviceTensor) host() any {
	if d.flat == nil {
		if d.shape.DType == dtypes.BFloat16 {
			d.flat = make([]bfloat16.BFloat16, d.shape.Size())
		} else {
			d.flat = make([]float32, d.shape.Size())
		}
	}
	return d.flat
}

// uploadFrom replaces the device buffer with a copy of flat (of d's dtype and size).
func (d *deviceTensor) uploadFrom(flat any) error {
	if d.t != nil {
		_ = d.t.FinalizeAll()
		d.t = nil
	}
	buf, err := d.copyTo.BufferFromFlatData(0, flat, d.shape)
	if err != nil {
		return fmt.Errorf("host→device copy of %s: %w", d.shape, err)
	}
	if d.t, err = tensors.FromBuffer(d.copyTo, buf); err != nil {
		_ = d.copyTo.BufferFinalize(buf)
		return fmt.Errorf("host→device copy of %s: %w", d.shape, err)
	}
	return nil
}

func (d *deviceTensor) free() {
	if d != nil && d.t != nil {
		_ = d.t.FinalizeAll()
	}
	if d != nil {
		d.t, d.flat = nil, nil
	}
}

// tensorSpec is one tensor of a unit as the device holds it.
type tensorSpec struct {
	suffix string // name after the unit's prefix ("model.layers.N." for layers, "" otherwise)
	shape  []int  // as stored in the checkpoint
	dtype  dtypes.DType
}

// deviceDims is the shape of the device buffer: a matrix [out, in] is held as [chunks, out/chunks, in], the
// same bytes in the same order, so that the matrix-vector products of decoding run as a batch of chunks in
// parallel (simplego parallelises DotGeneral over its batch axis only) and below the size where simplego
// repacks the whole weight matrix into blocks on every call. See linear.
func (s tensorSpec) deviceDims() []int {
	if len(s.shape) != 2 {
		return s.shape
	}
	out, in := s.shape[0], s.shape[1]
	c := weightChunks(out)
	return []int{c, out / c, in}
}

// matvecChunks is the number of row chunks a weight matrix is split into: enough to keep every core busy
// during decoding.
var matvecChunks = 4 * runtime.NumCPU()

// weightChunks returns the largest divisor of out that is at most matvecChunks.
func weightChunks(out int) int {
	for c := min(matvecChunks, out); c > 1; c-- {
		if out%c == 0 {
			return c
		}
	}
	return 1
}

// weightSet is a set of device buffers holding one unit's weights. Sets are allocated once per unit kind and
// refilled with unit after unit; a layer set serves any decoder layer.
//
// On the host-kernel path (hostOps) a decoder layer is not copied into the device buffers at all: view holds,
// per spec, the tensor read in place from the shard buffer buf the unit was loaded into (see alias), valid
// until the set is released, which hands buf back to the host pool.
type weightSet struct {
	kind    string // "layer", unitEmbed, unitNorm or unitLMHead
	unit    string // the unit it currently holds
	specs   []tensorSpec
	backend backends.Backend
	// tensors are the device buffers, per spec; nil until first needed (tensor) in a lazy set.
	tensors []*deviceTensor
	bytes   int64

	view []*deviceTensor
	buf  *shards.Buffer
	// layer is a decoder layer's host tensors bound to their roles (bound), until the set is refilled.
	layer *model.LayerWeights
	// routed, for a streamed sparse layer whose experts are read apart (experts.go), gives the experts its rows
	// are routed to; the view holds the layer's other tensors only.
	routed *routedLayer
	// pending, when set, is what the device buffers are still to be filled from (a resident unit the host
	// kernels read in place): filled the first time a graph needs them (deviceReady).
	pending *shards.Loaded
	// panelled: some of the view's matrices are packed in panels (weightStore.packPanels), in pending's buffer.
	panelled bool
}

// newWeightSet makes a set for specs. A lazy set allocates each device buffer when first needed: on the host
// kernels' path the graphs, which alone read most of them, may never run, and a buffer allocated but never
// written still counts in the Go heap the garbage collector paces itself by (with the f32 buffers of the
// 22-layer TinyLlama shape allocated up front, a 512-token prefill peaked at 2.1 GB, most of it garbage not yet
// collected). Otherwise they are all allocated now, so that a device budget too small fails at Open.
func newWeightSet(b backends.Backend, kind string, specs []tensorSpec, lazy bool) (*weightSet, error) {
	w := &weightSet{kind: kind, specs: specs, backend: b, tensors: make([]*deviceTensor, len(specs))}
	for i, s := range specs {
		w.bytes += int64(s.dtype.Size()) * int64(shapes.Make(s.dtype, s.shape...).Size())
		if lazy {
			continue
		}
		if _, err := w.tensor(i); err != nil {
			w.free()
			return nil, err
		}
	}
	return w, nil
}

// tensor returns spec i's device buffer, allocating it if it has none yet.
func (w *weightSet) tensor(i int) (*deviceTensor, error) {
	if w.tensors[i] == nil {
		s := w.specs[i]
		d, err := newDeviceTensor(w.backend, s.dtype, s.deviceDims()...)
		if err != nil {
			return nil, fmt.Errorf("%s weights: %w", w.kind, err)
		}
		w.tensors[i] = d
	}
	return w.tensors[i], nil
}

func (w *weightSet) free() {
	for _, t := range w.tensors {
		t.free()
	}
	w.tensors = nil
}

// hostTensors returns the tensors the host kernels read, in spec order: the in-place view when the unit was
// aliased, else the device buffers.
func (w *weightSet) hostTensors() []*deviceTensor {
	if w.view != nil {
		return w.view
	}
	return w.tensors
}

// bound returns the decoder layer's host tensors bound to their roles in the plan's LayerWeights, binding them
// on first use after each fill.
func (w *weightSet) bound(p *model.Plan) *model.LayerWeights {
	if w.layer == nil {
		ts := w.hostTensors()
		values := make([]model.Value, len(ts))
		holds := w.holds(p)
		for i, t := range ts {
			if t != nil && holds(i) { // nil: a tensor this kind of layer does not hold
				values[i] = t
			}
		}
		w.layer = p.Bind(values)
		if w.routed != nil {
			w.routed.slots(w.layer)
		}
	}
	return w.layer
}

// holds returns whether the decoder layer w holds has each spec (model.Plan.Holds); a head unit holds all.
func (w *weightSet) holds(p *model.Plan) func(i int) bool {
	l := layerIndex(w.unit)
	if w.kind != kindLayer || l < 0 || l >= len(p.Layers) {
		return func(int) bool { return true }
	}
	return func(i int) bool { return p.Holds(p.Layers[l], i) }
}

// args returns the device tensors of the specs the layer holds, in spec order, as graph inputs.
func (w *weightSet) args(p *model.Plan) []any {
	out := make([]any, 0, len(w.tensors))
	holds := w.holds(p)
	for i, t := range w.tensors {
		if holds(i) {
			out = append(out, t.t)
		}
	}
	return out
}

// held returns whether the unit holds each layer spec (all, for a head unit).
func (s *weightStore) held(unit string) func(i int) bool {
	l := layerIndex(unit)
	if l < 0 || l >= len(s.plan.Layers) {
		return func(int) bool { return true }
	}
	return func(i int) bool { return i >= len(s.plan.Weights) || s.plan.Holds(s.plan.Layers[l], i) }
}

// fill puts a loaded unit's weights into w's device buffers (the transfer stage), recording the time spent
// copying as h2d and the time spent converting dtypes (e.g. bf16 → f32) as decode. Without shared buffers the
// h2d time is that of the copies to the device.
func (s *weightStore) fill(w *weightSet, l *shards.Loaded) error {
	start := time.Now()
	conv, convTime, copied, err := w.fill(l, unitPrefix(l.Unit.Name), s.held(l.Unit.Name))
	step, layer := int(s.step.Load()), layerIndex(l.Unit.Name)
	elapsed := time.Since(start)
	if conv > 0 {
		s.prof.Record(profiler.Decode, step, layer, start, convTime, conv)
	}
	h2dBytes := copied
	if w.staged() {
		h2dBytes = w.bytes // every byte crosses to the device
	}
	if h2dBytes > 0 {
		s.prof.Record(profiler.H2D, step, layer, start.Add(convTime), elapsed-convTime, h2dBytes)
	}
	return err
}

// alias is the transfer stage of the host-kernel path: it points w's view at the loaded unit's tensors in the
// shard buffer, recording conversions as decode. Weight matrices stored in f32 or bf16 are read where they lie
// (the kernels widen bf16 exactly in registers, so bf16 storage computes the same values as an f32 copy);
// the other tensors (norm weights, biases: a few KB) and any that need a rounding conversion (f32 stored,
// bf16 compute) are converted into the set's own buffers as fill does. The caller keeps the shard buffer until
// the set is released.
func (s *weightStore) alias(w *weightSet, l *shards.Loaded) error {
	start := time.Now()
	unit, prefix := l.Unit.Name, unitPrefix(l.Unit.Name)
	w.unit = unit
	w.view, w.layer = make([]*deviceTensor, len(w.specs)), nil
	var converted int64
	held := s.held(unit)
	for i, spec := range w.specs {
		if !held(i) { // a tensor other kinds of layer hold (a dense layer's MLP, a sparse layer's experts)
			continue
		}
		if w.routed != nil && s.expertSpec[i] >= 0 {
			continue // read when routed to (routedLayer.bind)
		}
		raw, err := w.raw(l, prefix, spec)
		if err != nil {
			return err
		}
		v, n, err := s.hostView(spec, raw, prefix+spec.suffix, func() (*deviceTensor, error) { return w.tensor(i) })
		if err != nil {
			return fmt.Errorf("unit %s: %w", unit, err)
		}
		w.view[i], converted = v, converted+n
	}
	if converted > 0 {
		s.prof.Record(profiler.Decode, int(s.step.Load()), layerIndex(unit), start, time.Since(start), converted)
	}
	return nil
}

// hostView returns a tensor of spec, loaded as raw, as the host kernels read it (alias): in place where they can,
// else converted into own(); converted is the bytes converted.
func (s *weightStore) hostView(spec tensorSpec, raw shards.Tensor, name string, own func() (*deviceTensor, error)) (v *deviceTensor, converted int64, err error) {
	if raw.DType.Quantized() && len(spec.shape) == 2 {
		// A block-quantized matrix is read in place: the kernels decode its blocks in registers.
		q, err := quantView(raw, spec.shape)
		if err != nil {
			return nil, 0, fmt.Errorf("tensor %q: %w", name, err)
		}
		q.TwoPart = s.ownQuantized
		return &deviceTensor{flat: q, shape: shapes.Make(dtypes.Float32, spec.shape...), name: name}, 0, nil
	}
	widen := raw.DType == checkpoint.BF16 && spec.dtype == dtypes.Float32 && len(spec.shape) == 2
	if sameDType(raw.DType, spec.dtype) || widen {
		dt := dtypes.Float32
		if raw.DType == checkpoint.BF16 {
			dt = dtypes.BFloat16
		}
		return &deviceTensor{flat: rawView(raw), shape: shapes.Make(dt, spec.shape...), name: name}, 0, nil
	}
	d, err := own()
	if err != nil {
		return nil, 0, err
	}
	if err := convertInto(d.host(), raw); err != nil {
		return nil, 0, fmt.Errorf("tensor %q: %w", name, err)
	}
	d.name = name
	return d, int64(len(raw.Data)), nil
}

// hostTensor is a host array for spec (a routed expert's tensor converted for the host kernels: the expert cache
// keeps it apart from any set).
func hostTensor(spec tensorSpec) *deviceTensor {
	return &deviceTensor{shape: shapes.Make(spec.dtype, spec.deviceDims()...)}
}

// raw returns the loaded tensor of spec s (named prefix+s.suffix), checked against the spec's shape.
func (w *weightSet) raw(l *shards.Loaded, prefix string, s tensorSpec) (shards.Tensor, error) {
	name := prefix + s.suffix
	raw, ok := l.Tensors[name]
	if !ok {
		return raw, fmt.Errorf("unit %s: missing tensor %q (expected shape %v)", l.Unit.Name, name, s.shape)
	}
	if !slices.Equal(int64s(s.shape), raw.Shape) {
		return raw, fmt.Errorf("unit %s: tensor %q has shape %v, the config implies %v", l.Unit.Name, name, raw.Shape, s.shape)
	}
	return raw, nil
}

// staged reports whether filling the set copies every byte to the device (no shared buffers).
func (w *weightSet) staged() bool { return !w.backend.HasSharedBuffers() }

// fill copies or converts the unit's tensors (named prefix+suffix) into the set's device buffers. Without
// shared buffers a tensor already in the device dtype goes to the device straight from the shard buffer (no
// staging copy), except the embedding's, whose host copy the engine reads for token lookups; the others are
// converted into their staging buffers and copied from there. It returns the bytes converted between dtypes and
// the time converting them (host work only), and the bytes copied as they are.
func (w *weightSet) fill(l *shards.Loaded, prefix string, held func(i int) bool) (converted int64, convTime time.Duration, copied int64, err error) {
	unit := l.Unit.Name
	w.unit = unit
	w.view, w.layer = nil, nil
	for i, s := range w.specs {
		if !held(i) {
			continue
		}
		name := prefix + s.suffix
		raw, err := w.raw(l, prefix, s)
		if err != nil {
			return converted, convTime, copied, err
		}
		d, err := w.tensor(i)
		if err != nil {
			return converted, convTime, copied, err
		}
		d.name = name
		same := sameDType(raw.DType, s.dtype)
		if d.copyTo != nil && same && w.kind != unitEmbed {
			d.flat = nil // the host copy would be stale
			if err := d.uploadFrom(rawView(raw)); err != nil {
				return converted, convTime, copied, fmt.Errorf("unit %s: tensor %q: %w", unit, name, err)
			}
			copied += int64(len(raw.Data))
			continue
		}
		t0 := time.Now()
		err = convertInto(d.host(), raw)
		if same {
			copied += int64(len(raw.Data))
		} else {
			converted += int64(len(raw.Data))
			convTime += time.Since(t0)
		}
		if err == nil {
			err = d.upload()
		}
		if err != nil {
			return converted, convTime, copied, fmt.Errorf("unit %s: tensor %q: %w", unit, name, err)
		}
	}
	return converted, convTime, copied, nil
}

// quantView is a block-quantized shard tensor of the given [out, in] shape as the kernels read it, in place.
func quantView(raw shards.Tensor, shape []int) (kernels.QuantMatrix, error) {
	t, _ := raw.DType.Quant()
	return kernels.NewQuantMatrix(t, raw.Data, shape[0], shape[1])
}

// rawView is a shard tensor's bytes as the flat slice of its dtype (f32 or bf16), without copying: shard data is
// little-endian and 64-byte aligned.
func rawView(raw shards.Tensor) any {
	p := unsafe.Pointer(unsafe.SliceData(raw.Data))
	if raw.DType == checkpoint.BF16 {
		return unsafe.Slice((*bfloat16.BFloat16)(p), len(raw.Data)/2)
	}
	return unsafe.Slice((*float32)(p), len(raw.Data)/4)
}

func sameDType(c checkpoint.DType, d dtypes.DType) bool {
	return (c == checkpoint.F32 && d == dtypes.Float32) || (c == checkpoint.BF16 && d == dtypes.BFloat16)
}

func int64s(dims []int) []int64 {
	out := make([]int64, len(dims))
	for i, d := range dims {
		out[i] = int64(d)
	}
	return out
}

// bf16ToF32 widens bfloat16 values (shard data is little-endian and 64-byte aligned, so it is read as
// uint16 in place): the loop the transfer stage spends its time in when bf16 weights are computed in f32.
func bf16ToF32(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] = math.Float32frombits(uint32(v) << 16)
	}
}

// convertInto writes raw's elements into dst ([]float32 or []bfloat16.BFloat16), converting the dtype (a
// block-quantized tensor is dequantized: the graphs, unlike the host kernels, compute on float buffers).
// Same-dtype data is copied as bytes (little-endian host).
func convertInto(dst any, raw shards.Tensor) error {
	n := 1
	for _, d := range raw.Shape {
		n *= int(d)
	}
	if b, ok := dst.([]bfloat16.BFloat16); ok && raw.DType.Quantized() {
		if len(b) != n {
			return fmt.Errorf("%d elements for a buffer of %d", n, len(b))
		}
		f := make([]float32, n)
		if err := checkpoint.ToF32(f, raw.Data, raw.DType); err != nil {
			return err
		}
		checkpoint.F32ToBF16(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b))), 2*n), f)
		return nil
	}
	switch d := dst.(type) {
	case []float32:
		if len(d) != n {
			return fmt.Errorf("%d elements for a buffer of %d", n, len(d))
		}
		switch raw.DType {
		case checkpoint.F32:
			copy(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(d))), 4*len(d)), raw.Data)
			return nil
		case checkpoint.BF16:
			bf16ToF32(d, unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(raw.Data))), n))
			return nil
		}
		return checkpoint.ToF32(d, raw.Data, raw.DType)
	case []bfloat16.BFloat16:
		if len(d) != n {
			return fmt.Errorf("%d elements for a buffer of %d", n, len(d))
		}
		bytes := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(d))), 2*len(d))
		switch raw.DType {
		case checkpoint.BF16:
			copy(bytes, raw.Data)
			return nil
		case checkpoint.F32:
			checkpoint.F32ToBF16(bytes, unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(raw.Data))), n))
			return nil
		case checkpoint.F16:
			f := make([]float32, n)
			checkpoint.F16ToF32(f, raw.Data)
			checkpoint.F32ToBF16(bytes, f)
			return nil
		}
		return fmt.Errorf("cannot convert dtype %s to bf16", raw.DType)
	}
	return fmt.Errorf("unsupported device buffer type %T", dst)
}
