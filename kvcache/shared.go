package kvcache

import "fmt"

// Layers of one store may differ in their key/value heads and head size (Config.Dims: Gemma 4's full-attention
// layers have heads of their own size), and a layer may store nothing and attend with an earlier layer's keys and
// values (Config.Share: Gemma 4's num_kv_shared_layers): its View is that layer's storage, read-only.

// Dims are one layer's key/value heads and elements per head; zero values take Config's.
type Dims struct{ KVHeads, HeadDim int }

// LayerDims are layer's key/value heads and head size.
func (c Config) LayerDims(layer int) (kvHeads, headDim int) {
	kvHeads, headDim = c.KVHeads, c.HeadDim
	if c.Dims != nil {
		if d := c.Dims[layer]; d.KVHeads > 0 {
			kvHeads = d.KVHeads
		}
		if d := c.Dims[layer]; d.HeadDim > 0 {
			headDim = d.HeadDim
		}
	}
	return kvHeads, headDim
}

// Shared reports whether layer reads another layer's storage instead of its own.
func (c Config) Shared(layer int) bool { return c.source(layer) != layer }

// source is the layer whose storage layer uses.
func (c Config) source(layer int) int {
	if c.Share == nil {
		return layer
	}
	return c.Share[layer]
}

// checkShared refuses per-layer entries that do not match the layers, a layer sharing a layer that does not
// store its own, a later layer, or a recurrent one, and a recurrent layer sharing any (New would give it no state).
func (c Config) checkShared() error {
	if c.Dims != nil && len(c.Dims) != c.Layers {
		return fmt.Errorf("kvcache: %d layer dims for %d layers", len(c.Dims), c.Layers)
	}
	if c.Share == nil {
		return nil
	}
	if len(c.Share) != c.Layers {
		return fmt.Errorf("kvcache: %d shared layers for %d layers", len(c.Share), c.Layers)
	}
	for l, src := range c.Share {
		if src == l {
			continue
		}
		if src < 0 || src > l || c.Shared(src) || c.Recurrent(src) {
			return fmt.Errorf("kvcache: layer %d reads layer %d's keys and values, which is not an earlier layer storing its own", l, src)
		}
		if c.Recurrent(l) {
			return fmt.Errorf("kvcache: layer %d is recurrent and reads layer %d's keys and values: a recurrent layer keeps a state of its own", l, src)
		}
	}
	return nil
}
