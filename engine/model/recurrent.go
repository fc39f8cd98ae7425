package model

// Recurrent layers: Gated DeltaNet linear attention (Qwen3.5, Qwen3-Next). A recurrent layer keeps, per sequence,
// a fixed-size state instead of keys and values: the last K-1 inputs of its depthwise causal conv1d and one
// delta-rule state matrix [d_k, d_v] per value head. The engine holds it in the layer's cache (kvcache.State);
// the ops read it at the sequence's first new position and leave it at its last.

// RecurrentState sizes a recurrent layer's state per sequence, in float32 elements: Conv, the conv1d's last
// inputs ((kernel-1)·channels), and Delta, the delta rule's matrices (valueHeads·keyDim·valueDim).
type RecurrentState struct{ Conv, Delta int }

// DeltaNetWeights are a Gated DeltaNet layer's weights (Qwen3.5's names under linear_attn.): the projections
// to the conv's channels q|k|v (InQKV), to the output gate z (InZ), to beta (InB) and to the decay's input (InA);
// the depthwise conv1d [channels, 1, kernel]; A_log and dt_bias [valueHeads]; the gated RMSNorm's weight
// [valueDim]; the output projection.
type DeltaNetWeights struct {
	InQKV, InZ, InB, InA, Out Linear
	// Qwen3-Next's grouped projections: in_proj_qkvz gives per key head [q, k, v, z] of its value heads,
	// in_proj_ba per key head [b, a] (model.deltaNet.grouped).
	InQKVZ, InBA             Linear
	Conv, ALog, DTBias, Norm Value
}

// DeltaRule parameterises Ops.GatedDeltaRule: the heads and their sizes, and A_log and dt_bias [valueHeads].
// Value head h reads key head h / (ValueHeads/KeyHeads): the value heads grouped by key head, in Hugging Face's
// order; with Tiled, h mod KeyHeads: llama.cpp's order, in which its GGUF converter writes the value heads' rows
// and columns (KeyHead).
type DeltaRule struct {
	KeyHeads, ValueHeads, KeyDim, ValueDim int
	Tiled                                  bool
	ALog, DTBias                           Value
}

// KeyHead is the key head value head h reads.
func (r DeltaRule) KeyHead(h int) int {
	if r.Tiled {
		return h % r.KeyHeads
	}
	return h / (r.ValueHeads / r.KeyHeads)
}

// RecurrentOps are the operations of recurrent layers. They use the layer's state in the cache: each row's
// state after its committed positions (zero for a sequence starting), updated through its new positions.
type RecurrentOps interface {
	// MergeHeads is the inverse of Heads: [B, heads, T, d] to [B, T, heads·d].
	MergeHeads(x Value) Value
	// Concat joins arrays of equal leading axes along their last axis (the inverse of Split).
	Concat(xs ...Value) Value
	// CausalConv is the depthwise causal conv1d of x [B, T, C] with w [C, 1, K] over each row's last K-1 inputs
	// (the conv state) and its new ones, without bias or activation: y[t, c] = Σ_j w[c, 0, j]·u[t-K+1+j, c]. It
	// returns y [B, T, C] and, for graphs, the new conv state.
	CausalConv(x, w Value) (y, state Value)
	// GatedDeltaRule runs the gated delta rule over the new positions of each row from its state: q, k
	// [B, T, keyHeads·keyDim] (l2-normalised here, q scaled by keyDim^-½, each key head serving
	// valueHeads/keyHeads value heads), v [B, T, valueHeads·valueDim], a and b [B, T, valueHeads] (decay
	// g = -exp(A_log)·softplus(a + dt_bias), beta = σ(b)). Per position: S = S·exp(g); S += k ⊗ beta·(v - Sᵀk);
	// o = Sᵀq. It returns o [B, T, valueHeads·valueDim] and, for graphs, the new state.
	GatedDeltaRule(q, k, v, a, b Value, p DeltaRule) (o, state Value)
}
