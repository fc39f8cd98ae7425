package checkpoint

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Rope holds a rotary embedding's parameters as transformers 5's rope_parameters names them. Zero values mean
// absent; engine/model computes the frequencies and refuses the types it does not implement.
type Rope struct {
	// Type is "default", "linear", "dynamic", "yarn", "llama3", "longrope" or "proportional".
	Type  string
	Theta float64
	// PartialRotaryFactor is the fraction of head_dim that is rotated (0: all of it).
	PartialRotaryFactor float64
	// Factor scales the context (linear, dynamic, yarn, llama3, longrope).
	Factor float64
	// OriginalMaxPositionEmbeddings is the pre-training context (yarn, llama3, longrope): the rope dict's,
	// config.json's top-level key of that name (which transformers prefers), else max_position_embeddings.
	OriginalMaxPositionEmbeddings int
	// llama3
	LowFreqFactor, HighFreqFactor float64
	// yarn and longrope: AttentionFactor multiplies cos and sin (nil: derived from the factor).
	AttentionFactor *float64
	// yarn: ramp bounds (0: transformers' defaults 32 and 1), mscale pair, whether to round the ramp's ends
	// (nil: true).
	BetaFast, BetaSlow   float64
	Mscale, MscaleAllDim float64
	Truncate             *bool
	// longrope
	ShortFactor, LongFactor []float64
	// Llama4ScalingBeta is Ministral 3's llama_4_scaling_beta (queries × 1 + β·ln(1 + ⌊pos / original⌋)), read
	// only where the family lists it in Architecture.RopeKeys; nil when absent.
	Llama4ScalingBeta *float64
}

// ropeKeys are the keys each rope type may carry (transformers 5's validation lists), besides rope_type, type,
// rope_theta and partial_rotary_factor.
var ropeKeys = map[string][]string{
	"default":  nil,
	"linear":   {"factor"},
	"dynamic":  {"factor"},
	"yarn":     {"factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate"},
	"llama3":   {"factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"},
	"longrope": {"short_factor", "long_factor", "original_max_position_embeddings", "attention_factor", "factor"},
	// Gemma 4's full-attention layers: the first partial_rotary_factor of the frequencies rotate, the others are 0.
	"proportional": {"factor"},
}

// ropeRequired are the keys each type must carry (after the top-level fallbacks).
var ropeRequired = map[string][]string{
	"linear":   {"factor"},
	"dynamic":  {"factor"},
	"llama3":   {"factor", "low_freq_factor", "high_freq_factor"},
	"longrope": {"short_factor", "long_factor"},
}

// parseRope reads the rotary parameters in either spelling: transformers 5's "rope_parameters" (flat, or nested
// by layer type when its keys are layer_types entries), or transformers 4's "rope_theta" and "rope_scaling"
// (whose type is "rope_type" or the older "type"). Both spellings at once must agree.
func parseRope(m map[string]json.RawMessage, c *Config) (Rope, map[string]Rope, error) {
	theta, err := optFloat(m, "rope_theta")
	if err != nil {
		return Rope{}, nil, err
	}
	partial, err := optFloat(m, "partial_rotary_factor")
	if err != nil {
		return Rope{}, nil, err
	}
	var topOrig int
	if raw, ok := m["original_max_position_embeddings"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &topOrig); err != nil {
			return Rope{}, nil, fmt.Errorf("config: original_max_position_embeddings: want an integer, got %s", short(raw))
		}
	}
	defTheta := c.Arch.DefaultRopeTheta
	if defTheta == 0 {
		defTheta = 10000
	}
	params, scaling := m["rope_parameters"], m["rope_scaling"]
	if !isEmpty(params) && !isEmpty(scaling) {
		return Rope{}, nil, fmt.Errorf("config: both rope_parameters %s and rope_scaling %s are set: give one", short(params), short(scaling))
	}
	src, raw := "rope_parameters", params
	if isEmpty(params) {
		src, raw = "rope_scaling", scaling
	}
	if isEmpty(raw) && c.Arch.DefaultRope != nil {
		src = "the default rope_parameters of " + c.Arch.Name
		raw, _ = json.Marshal(c.Arch.DefaultRope)
	}
	var dict map[string]json.RawMessage
	if !isEmpty(raw) {
		if err := json.Unmarshal(raw, &dict); err != nil {
			return Rope{}, nil, fmt.Errorf("config: %s: want an object, got %s", src, short(raw))
		}
	}
	one := func(name, layerType string, d map[string]json.RawMessage) (Rope, error) {
		r, err := ropeFrom(name, d, c, topOrig)
		if err != nil {
			return r, err
		}
		if r.Theta == 0 {
			switch def, ok := c.Arch.DefaultLayerTypeRopeTheta[layerType]; {
			case theta != nil:
				r.Theta = *theta
			case ok:
				r.Theta = def
			default:
				r.Theta = defTheta
			}
		} else if theta != nil && *theta != r.Theta {
			return r, fmt.Errorf("config: rope_theta %g and %s.rope_theta %g disagree", *theta, name, r.Theta)
		}
		if !(r.Theta > 0) {
			return r, fmt.Errorf("config: %s rope_theta must be positive, got %g", name, r.Theta)
		}
		if r.PartialRotaryFactor == 0 && partial != nil {
			r.PartialRotaryFactor = *partial
		}
		return r, nil
	}
	if nested := nestedRopeKeys(dict, c.LayerTypes); len(nested) > 0 {
		byType := map[string]Rope{}
		for _, lt := range nested {
			var d map[string]json.RawMessage
			if err := json.Unmarshal(dict[lt], &d); err != nil {
				return Rope{}, nil, fmt.Errorf("config: %s.%s: want an object, got %s", src, lt, short(dict[lt]))
			}
			r, err := one(src+"."+lt, lt, d)
			if err != nil {
				return Rope{}, nil, err
			}
			byType[lt] = r
		}
		return byType["full_attention"], byType, nil
	}
	r, err := one(src, "", dict)
	return r, nil, err
}

// layerTypeNames are the layer types every family names its rope_parameters entries by, whether config.json
// lists layer_types or the family derives them (Gemma 3's sliding_window_pattern).
var layerTypeNames = []string{"full_attention", "sliding_attention"}

// nestedRopeKeys returns the keys of a rope dict nested by layer type (every key a layer_types entry or a
// layer type name), sorted; nil for a flat dict.
func nestedRopeKeys(d map[string]json.RawMessage, layerTypes []string) []string {
	if len(d) == 0 {
		return nil
	}
	for k := range d {
		if !slices.Contains(layerTypes, k) && !slices.Contains(layerTypeNames, k) {
			return nil
		}
	}
	return sortedKeys(d)
}

// ropeFrom reads one flat rope dict (name is where it came from, for errors); a nil dict is the default rope.
func ropeFrom(name string, d map[string]json.RawMessage, c *Config, topOrig int) (Rope, error) {
	r := Rope{Type: "default"}
	var types []string
	for _, k := range []string{"rope_type", "type"} {
		if raw, ok := d[k]; ok && !isNull(raw) {
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return r, fmt.Errorf("config: %s.%s: want a string, got %s", name, k, short(raw))
			}
			types = append(types, s)
		}
	}
	if len(types) == 2 && types[0] != types[1] {
		return r, fmt.Errorf("config: %s: rope_type %q and type %q disagree", name, types[0], types[1])
	}
	if len(types) > 0 {
		r.Type = types[0]
	}
	if r.Type == "su" { // Phi-3's first name for longrope, as transformers reads it
		r.Type = "longrope"
	}
	allowed, ok := ropeKeys[r.Type]
	if !ok {
		return r, fmt.Errorf("config: %s: rope type %q is not supported (supported: %s)", name, r.Type, strings.Join(sortedKeys(ropeKeys), ", "))
	}
	for _, k := range sortedKeys(d) {
		if !slices.Contains(allowed, k) && !slices.Contains(c.Arch.RopeKeys, k) && !slices.Contains([]string{"rope_type", "type", "rope_theta", "partial_rotary_factor"}, k) {
			return r, fmt.Errorf("config: %s: key %s (value %s) is not a parameter of rope type %q", name, k, short(d[k]), r.Type)
		}
	}
	for _, k := range ropeRequired[r.Type] {
		if isAbsentOrNull(d, k) {
			return r, fmt.Errorf("config: %s: rope type %q needs %s", name, r.Type, k)
		}
	}
	floats := []struct {
		key string
		dst *float64
	}{
		{"rope_theta", &r.Theta}, {"partial_rotary_factor", &r.PartialRotaryFactor}, {"factor", &r.Factor},
		{"low_freq_factor", &r.LowFreqFactor}, {"high_freq_factor", &r.HighFreqFactor},
		{"beta_fast", &r.BetaFast}, {"beta_slow", &r.BetaSlow}, {"mscale", &r.Mscale}, {"mscale_all_dim", &r.MscaleAllDim},
	}
	for _, f := range floats {
		v, err := optFloat(d, f.key)
		if err != nil {
			return r, fmt.Errorf("%s: %w", name, err)
		}
		if v != nil {
			*f.dst = *v
		}
	}
	var err error
	if r.AttentionFactor, err = optFloat(d, "attention_factor"); err != nil {
		return r, fmt.Errorf("%s: %w", name, err)
	}
	if r.Llama4ScalingBeta, err = optFloat(d, "llama_4_scaling_beta"); err != nil {
		return r, fmt.Errorf("%s: %w", name, err)
	}
	if raw, ok := d["truncate"]; ok && !isNull(raw) {
		var t bool
		if err := json.Unmarshal(raw, &t); err != nil {
			return r, fmt.Errorf("config: %s.truncate: want true or false, got %s", name, short(raw))
		}
		r.Truncate = &t
	}
	for _, l := range []struct {
		key string
		dst *[]float64
	}{{"short_factor", &r.ShortFactor}, {"long_factor", &r.LongFactor}} {
		if raw, ok := d[l.key]; ok && !isNull(raw) {
			if err := json.Unmarshal(raw, l.dst); err != nil {
				return r, fmt.Errorf("config: %s.%s: want a list of numbers, got %s", name, l.key, short(raw))
			}
		}
	}
	switch r.Type {
	case "yarn", "llama3", "longrope":
		// transformers prefers a top-level original_max_position_embeddings (Phi-3 keeps it there), then the
		// rope dict's, then max_position_embeddings.
		top := topOrig
		switch {
		case top > 0:
			r.OriginalMaxPositionEmbeddings = top
		case !isAbsentOrNull(d, "original_max_position_embeddings"):
			if err := json.Unmarshal(d["original_max_position_embeddings"], &r.OriginalMaxPositionEmbeddings); err != nil {
				return r, fmt.Errorf("config: %s.original_max_position_embeddings: want an integer, got %s", name, short(d["original_max_position_embeddings"]))
			}
		default:
			r.OriginalMaxPositionEmbeddings = c.MaxPositionEmbeddings
		}
		if r.OriginalMaxPositionEmbeddings <= 0 {
			return r, fmt.Errorf("config: %s.original_max_position_embeddings must be positive, got %d", name, r.OriginalMaxPositionEmbeddings)
		}
	}
	if r.Type == "proportional" && isAbsentOrNull(d, "factor") {
		r.Factor = 1 // transformers' default for proportional
	}
	if r.Type != "default" && r.Type != "longrope" && r.Type != "yarn" && !(r.Factor > 0) {
		return r, fmt.Errorf("config: %s: rope type %q needs a positive factor, got %g", name, r.Type, r.Factor)
	}
	return r, nil
}

func isEmpty(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null" || s == "{}"
}

// optFloat reads an optional number: nil when absent or null.
func optFloat(m map[string]json.RawMessage, k string) (*float64, error) {
	raw, ok := m[k]
	if !ok || isNull(raw) {
		return nil, nil
	}
	var v float64
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("config: %s: want a number, got %s", k, short(raw))
	}
	return &v, nil
}
