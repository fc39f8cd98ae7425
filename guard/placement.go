package guard

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/bytesize"
	"github.com/layerstream/layerstream/internal/sections"
)

// UnitSize is one unit of a split checkpoint (embed, layer.N, norm, lm_head) and the bytes it occupies on a device,
// which depend on how that device computes (HeldBytes): Bytes where the engine dequantizes block-quantized matrices
// (the compiled graphs of cuda and xla-cpu, and of cpu with --graph-decode), InPlaceBytes where its host kernels
// read them in place (cpu), as their blocks and bf16 matrices as bf16. The two are equal for a unit without
// block-quantized or bf16 matrices.
type UnitSize struct {
	Name         string
	Bytes        int64
	InPlaceBytes int64
}

// On returns the bytes u occupies on device d.
func (u UnitSize) On(d Device) int64 {
	if d.InPlace {
		return u.InPlaceBytes
	}
	return u.Bytes
}

// Device is one device a model may be spread across, with the memory the plan may use on it. InPlace says the
// engine computes there with its host kernels, which read block-quantized and bf16 matrices in place (HeldBytes' inPlace):
// true for cpu without --graph-decode (InPlaceDevice), false for cuda and xla-cpu.
type Device struct {
	Name        string
	MemoryBytes int64
	InPlace     bool
}

// InPlaceDevice reports whether the engine's host kernels compute on the device named name (cpu, or cpu:N, and
// not graphDecode), reading block-quantized and bf16 matrices in place; every other device (cuda, cuda:N, xla-cpu, ...)
// computes with the compiled graphs on dequantized matrices, as the engine forces GraphDecode off cpu.
func InPlaceDevice(name string, graphDecode bool) bool {
	kind, _, _ := strings.Cut(strings.ToLower(name), ":")
	return kind == "cpu" && !graphDecode
}

// Assignment places one unit on one device.
type Assignment struct {
	Unit   string
	Device string
	Bytes  int64
}

// Boundary is a point in the forward pass where activations must be copied explicitly between devices: after
// unit After (on From) and before unit Before (on To).
type Boundary struct {
	After, Before string
	From, To      string
}

// Placement is a plan that gives every unit a device.
type Placement struct {
	Devices     []Device
	Assignments []Assignment // in forward-pass order
	Boundaries  []Boundary   // in forward-pass order
	// Primary is the device holding embed, the first and last layers, norm and lm_head.
	Primary string
}

// DeviceOf returns the device a unit is placed on.
func (p *Placement) DeviceOf(unit string) (string, bool) {
	for _, a := range p.Assignments {
		if a.Unit == unit {
			return a.Device, true
		}
	}
	return "", false
}

// Used returns the bytes placed on the named device.
func (p *Placement) Used(device string) int64 {
	var n int64
	for _, a := range p.Assignments {
		if a.Device == device {
			n += a.Bytes
		}
	}
	return n
}

// UnitSizes returns the units of ck (embed, layer.0.., norm, lm_head when present) with the device bytes their
// tensors take as the engine keeps them (HeldBytes): matrices in dtype and vectors (norm weights, biases) in
// float32, block-quantized matrices (a GGUF file's) dequantized to dtype in Bytes and as their blocks in
// InPlaceBytes, bf16 matrices in dtype in Bytes and as bf16 in InPlaceBytes: the input Plan needs. A tensor outside every unit is an error.
func UnitSizes(ck *checkpoint.Checkpoint, dtype checkpoint.DType) ([]UnitSize, error) {
	if dtype.Size() == 0 {
		return nil, fmt.Errorf("placement: unknown dtype %q", dtype)
	}
	sizes := map[string]*UnitSize{}
	for _, t := range ck.Tensors {
		var unit string
		switch {
		case strings.HasPrefix(t.Name, "model.embed_tokens."):
			unit = "embed"
		case strings.HasPrefix(t.Name, "model.norm."):
			unit = "norm"
		case strings.HasPrefix(t.Name, "lm_head."):
			unit = "lm_head"
		case strings.HasPrefix(t.Name, "model.layers."):
			n, _, _ := strings.Cut(strings.TrimPrefix(t.Name, "model.layers."), ".")
			if _, err := strconv.Atoi(n); err != nil {
				return nil, fmt.Errorf("placement: tensor %q: bad layer number", t.Name)
			}
			unit = "layer." + n
		default:
			return nil, fmt.Errorf("placement: tensor %q belongs to no unit (embed, layer.N, norm, lm_head)", t.Name)
		}
		if sizes[unit] == nil {
			sizes[unit] = &UnitSize{Name: unit}
		}
		sizes[unit].Add(t.DType, t.Shape, t.Length, dtype)
	}
	size := func(name string) UnitSize {
		if u := sizes[name]; u != nil {
			return *u
		}
		return UnitSize{Name: name}
	}
	units := []UnitSize{size("embed")}
	for i := range ck.Config.NumHiddenLayers {
		units = append(units, size("layer."+strconv.Itoa(i)))
	}
	units = append(units, size("norm"))
	if _, ok := sizes["lm_head"]; ok {
		units = append(units, size("lm_head"))
	}
	return units, nil
}

// Add counts one tensor of the unit (its stored dtype, shape and stored byte count) as the engine holds it
// (HeldBytes) with matrices computed in dtype: converted in Bytes, block-quantized and bf16 matrices in place in
// InPlaceBytes.
func (u *UnitSize) Add(stored checkpoint.DType, shape []int64, length int64, dtype checkpoint.DType) {
	u.Bytes += HeldBytes(stored, shape, length, dtype, false)
	u.InPlaceBytes += HeldBytes(stored, shape, length, dtype, true)
}

// HeldBytes is the memory the engine holds one tensor of a unit in, given its stored dtype, shape and stored byte
// count (length): where the host kernels multiply matrices in place (inPlace: cpu without --graph-decode), a
// block-quantized matrix (a GGUF file's, or a quantized split's) as its blocks and a bf16 matrix as its bf16
// bytes (the kernels widen it in registers, whatever dtype computes), else a matrix converted to dtype, as the
// graphs read it; a vector (norm weights, biases) in float32.
func HeldBytes(stored checkpoint.DType, shape []int64, length int64, dtype checkpoint.DType, inPlace bool) int64 {
	elems := int64(1)
	for _, d := range shape {
		elems *= d
	}
	switch {
	case len(shape) != 2:
		return elems * 4
	case stored.Quantized() && inPlace:
		return length
	case stored == checkpoint.BF16 && inPlace:
		return elems * 2
	}
	return elems * int64(dtype.Size())
}

// Plan places units on devices. embed, the first layer, the last layer, norm and lm_head share one device (the
// first device, in the order given, that holds them all): the token ids enter and the logits leave there, and the
// sampled token feeds the next step without a copy. The other layers are spread over all devices in proportion to
// the memory each has left, in contiguous runs so that activations cross as few boundaries as possible. Every unit
// must fit: Plan returns an error naming what does not.
func Plan(units []UnitSize, devices []Device) (*Placement, error) {
	layers, ends, err := splitUnits(units)
	if err != nil {
		return nil, err
	}
	if err := checkDevices(devices); err != nil {
		return nil, err
	}
	// The anchored units: embed, layer.0, layer.N-1, norm, lm_head.
	anchored := append([]UnitSize{}, ends...)
	anchored = append(anchored, layers[0])
	if len(layers) > 1 {
		anchored = append(anchored, layers[len(layers)-1])
	}
	primary, err := primaryDevice(anchored, devices)
	if err != nil {
		return nil, err
	}
	anchorBytes := sumOn(anchored, devices[primary])

	// Order the devices primary first, then the others as given; the middle layers start on the primary.
	order := []int{primary}
	for i := range devices {
		if i != primary {
			order = append(order, i)
		}
	}
	free := make([]int64, len(devices))
	for i, d := range devices {
		free[i] = d.MemoryBytes
	}
	free[primary] -= anchorBytes
	var middle []UnitSize
	if len(layers) > 2 {
		middle = layers[1 : len(layers)-1]
	}
	// Sizes and shortfalls are reported as the primary device holds the layers.
	midBytes := sumOn(middle, devices[primary])
	share, ok := shares(middle, devices, free)
	if !ok {
		short := int64(math.Ceil(float64(midBytes) * (1 - sumFloats(share))))
		return nil, fmt.Errorf("placement: the model needs %s but the devices hold %s in all (%s short); add a device or memory (see %s)",
			bytesize.FormatBinary(midBytes+anchorBytes), bytesize.FormatBinary(midBytes+anchorBytes-short), bytesize.FormatBinary(short), sections.Anchor(sections.Placement))
	}
	assign, ok := spread(middle, devices, free, order, share)
	if !ok {
		var totalFree int64
		for _, f := range free {
			totalFree += f
		}
		return nil, fmt.Errorf("placement: the %d middle layers (%s) fit the devices' free memory in total (%s) but not as whole layers; add memory (see %s)",
			len(middle), bytesize.FormatBinary(midBytes), bytesize.FormatBinary(totalFree), sections.Anchor(sections.Placement))
	}

	p := &Placement{Devices: devices, Primary: devices[primary].Name}
	p.add(ends[0], devices[primary]) // embed
	p.add(layers[0], devices[primary])
	for i, u := range middle {
		p.add(u, devices[assign[i]])
	}
	if len(layers) > 1 {
		p.add(layers[len(layers)-1], devices[primary])
	}
	for _, u := range ends[1:] { // norm, lm_head
		p.add(u, devices[primary])
	}
	return p, nil
}

// checkDevices checks that the devices have names, each its own, and memory.
func checkDevices(devices []Device) error {
	if len(devices) == 0 {
		return fmt.Errorf("placement: no devices")
	}
	seen := map[string]bool{}
	for _, d := range devices {
		if d.Name == "" || seen[d.Name] {
			return fmt.Errorf("placement: device names must be unique and non-empty, got %q", d.Name)
		}
		seen[d.Name] = true
		if d.MemoryBytes <= 0 {
			return fmt.Errorf("placement: device %s has %d bytes of memory", d.Name, d.MemoryBytes)
		}
	}
	return nil
}

// primaryDevice is the first device that holds the anchored units together.
func primaryDevice(anchored []UnitSize, devices []Device) (int, error) {
	for i, d := range devices {
		if d.MemoryBytes >= sumOn(anchored, d) {
			return i, nil
		}
	}
	largest := devices[0]
	for _, d := range devices {
		if d.MemoryBytes > largest.MemoryBytes {
			largest = d
		}
	}
	names := make([]string, len(anchored))
	for i, u := range anchored {
		names[i] = u.Name
	}
	return 0, fmt.Errorf("placement: %s must share one device and need %s together, but the largest device (%s) has %s (see %s)",
		strings.Join(names, ", "), bytesize.FormatBinary(sumOn(anchored, largest)), largest.Name, bytesize.FormatBinary(largest.MemoryBytes), sections.Anchor(sections.Placement))
}

// shares returns the fraction of the middle layers each device is to hold: in proportion to the number of times
// its free memory holds them all, each layer sized as it is held there (On), so that with equal sizes everywhere
// a device's share is its share of the free memory. ok is false when the devices together hold less than all
// of them; the shares are then the unnormalized capacities, summing to below 1.
func shares(middle []UnitSize, devices []Device, free []int64) (share []float64, ok bool) {
	share = make([]float64, len(devices))
	for i, d := range devices {
		if n := sumOn(middle, d); n > 0 {
			share[i] = float64(free[i]) / float64(n)
		} else {
			share[i] = float64(len(devices)) // nothing to place: any device holds it all
		}
	}
	capacity := sumFloats(share)
	if capacity < 1 {
		return share, false
	}
	for i := range share {
		share[i] /= capacity
	}
	return share, true
}

// add places unit u on device d after the units placed so far, noting a boundary where the device changes.
func (p *Placement) add(u UnitSize, d Device) {
	a := Assignment{Unit: u.Name, Device: d.Name, Bytes: u.On(d)}
	if n := len(p.Assignments); n > 0 && p.Assignments[n-1].Device != a.Device {
		prev := p.Assignments[n-1]
		p.Boundaries = append(p.Boundaries, Boundary{After: prev.Unit, Before: a.Unit, From: prev.Device, To: a.Device})
	}
	p.Assignments = append(p.Assignments, a)
}

// sumOn is the bytes of units as device d holds them.
func sumOn(units []UnitSize, d Device) int64 {
	var n int64
	for _, u := range units {
		n += u.On(d)
	}
	return n
}

func sumFloats(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

// spread assigns the middle layers, in contiguous runs, to devices taken in order: device k takes layers while the
// running share of the layers (each counted by its Bytes) stays within the cumulative share of the devices so far,
// and never more than its free memory (each layer counted as held there, On); ok is false when the layers do not
// fit.
func spread(middle []UnitSize, devices []Device, free []int64, order []int, share []float64) (assign []int, ok bool) {
	assign = make([]int, len(middle))
	var midBytes float64
	for _, u := range middle {
		midBytes += float64(u.Bytes)
	}
	quota := func(k int) float64 { return midBytes * share[order[k]] }
	k, used, cum := 0, int64(0), int64(0)
	quotaEnd := quota(0)
	for i, u := range middle {
		for k < len(order)-1 && (used+u.On(devices[order[k]]) > free[order[k]] || float64(cum)+float64(u.Bytes)/2 > quotaEnd) {
			k++
			used = 0
			quotaEnd += quota(k)
		}
		if used+u.On(devices[order[k]]) > free[order[k]] {
			return nil, false
		}
		assign[i] = order[k]
		used += u.On(devices[order[k]])
		cum += u.Bytes
	}
	return assign, true
}

// splitUnits validates the unit list and returns the layers in order and the other units (embed, norm[, lm_head]).
func splitUnits(units []UnitSize) (layers, ends []UnitSize, err error) {
	var embed, norm, head *UnitSize
	byIndex := map[int]UnitSize{}
	for i := range units {
		u := units[i]
		if u.Bytes < 0 {
			return nil, nil, fmt.Errorf("placement: unit %s has negative size %d", u.Name, u.Bytes)
		}
		switch {
		case u.Name == "embed":
			embed = &units[i]
		case u.Name == "norm":
			norm = &units[i]
		case u.Name == "lm_head":
			head = &units[i]
		case strings.HasPrefix(u.Name, "layer."):
			n, err := strconv.Atoi(strings.TrimPrefix(u.Name, "layer."))
			if err != nil || n < 0 {
				return nil, nil, fmt.Errorf("placement: bad unit name %q (want layer.N)", u.Name)
			}
			if _, dup := byIndex[n]; dup {
				return nil, nil, fmt.Errorf("placement: unit %s listed twice", u.Name)
			}
			byIndex[n] = u
		default:
			return nil, nil, fmt.Errorf("placement: unknown unit %q (want embed, layer.N, norm or lm_head)", u.Name)
		}
	}
	if embed == nil || norm == nil || len(byIndex) == 0 {
		return nil, nil, fmt.Errorf("placement: units must include embed, norm and at least one layer.N")
	}
	for i := range len(byIndex) {
		u, ok := byIndex[i]
		if !ok {
			return nil, nil, fmt.Errorf("placement: layer.%d missing (layers must be numbered 0..%d)", i, len(byIndex)-1)
		}
		layers = append(layers, u)
	}
	ends = []UnitSize{*embed, *norm}
	if head != nil {
		ends = append(ends, *head)
	}
	return layers, ends, nil
}

// String prints the plan for --print-placement: each device with its units (layer runs collapsed) and memory
// use, then every boundary where activations move.
func (p *Placement) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "placement: %d units on %d devices (primary %s: embed, first and last layers, norm, lm_head)\n",
		len(p.Assignments), len(p.Devices), p.Primary)
	for _, d := range p.Devices {
		var units []string
		for _, a := range p.Assignments {
			if a.Device == d.Name {
				units = append(units, a.Unit)
			}
		}
		used := p.Used(d.Name)
		list := collapse(units)
		if list == "" {
			list = "(nothing)"
		}
		fmt.Fprintf(&b, "  %-12s %9s of %9s (%3.0f%%)  %s\n", d.Name, bytesize.FormatBinary(used), bytesize.FormatBinary(d.MemoryBytes),
			100*float64(used)/float64(d.MemoryBytes), list)
	}
	if len(p.Boundaries) == 0 {
		b.WriteString("no device boundaries: activations stay on one device\n")
	} else {
		fmt.Fprintf(&b, "%d device boundaries (activations copied explicitly):\n", len(p.Boundaries))
		for _, x := range p.Boundaries {
			fmt.Fprintf(&b, "  %s (%s) -> %s (%s)\n", x.After, x.From, x.Before, x.To)
		}
	}
	return b.String()
}

// collapse writes unit names with consecutive layers as ranges: "embed, layer.0-3, layer.9, norm".
func collapse(units []string) string {
	var parts []string
	for i := 0; i < len(units); i++ {
		n, ok := layerIndex(units[i])
		if !ok {
			parts = append(parts, units[i])
			continue
		}
		j := i
		for j+1 < len(units) {
			m, ok := layerIndex(units[j+1])
			if !ok || m != n+(j+1-i) {
				break
			}
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%s-%d", units[i], n+j-i))
		} else {
			parts = append(parts, units[i])
		}
		i = j
	}
	return strings.Join(parts, ", ")
}

func layerIndex(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, "layer.")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}
