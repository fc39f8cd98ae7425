package gguf

import (
	"fmt"
	"math"
)

// Uint returns an integer value (any integer type, non-negative); ok is false when the key is absent.
func (g *File) Uint(key string) (v uint64, ok bool, err error) {
	val, ok := g.Get(key)
	if !ok {
		return 0, false, nil
	}
	v, err = asUint(val.V)
	if err != nil {
		return 0, true, fmt.Errorf("metadata %s: %w", key, err)
	}
	return v, true, nil
}

func asUint(v any) (uint64, error) {
	var i int64
	switch x := v.(type) {
	case uint8:
		return uint64(x), nil
	case uint16:
		return uint64(x), nil
	case uint32:
		return uint64(x), nil
	case uint64:
		return x, nil
	case int8:
		i = int64(x)
	case int16:
		i = int64(x)
	case int32:
		i = int64(x)
	case int64:
		i = x
	default:
		return 0, fmt.Errorf("want an integer, got %s", describe(v))
	}
	if i < 0 {
		return 0, fmt.Errorf("want a non-negative integer, got %d", i)
	}
	return uint64(i), nil
}

// Int returns a non-negative integer value that fits an int.
func (g *File) Int(key string) (int, bool, error) {
	v, ok, err := g.Uint(key)
	if err == nil && v > math.MaxInt32 {
		err = fmt.Errorf("metadata %s: %d is out of range", key, v)
	}
	return int(v), ok, err
}

// Float returns a float32 or float64 value as float64, refusing NaN and infinities: no metadata float
// layerstream reads may be one, and config.json (JSON) cannot spell them.
func (g *File) Float(key string) (float64, bool, error) {
	return g.float(key, false)
}

// PositiveFloat is Float for a value that must be finite and above 0 (a norm's epsilon, a rotary base, a
// scaling factor).
func (g *File) PositiveFloat(key string) (float64, bool, error) {
	return g.float(key, true)
}

func (g *File) float(key string, positive bool) (float64, bool, error) {
	val, ok := g.Get(key)
	if !ok {
		return 0, false, nil
	}
	var v float64
	switch x := val.V.(type) {
	case float32:
		v = float64(x)
	case float64:
		v = x
	default:
		return 0, true, fmt.Errorf("metadata %s: want a float, got %s", key, describe(val.V))
	}
	switch {
	case positive && !(v > 0 && !math.IsInf(v, 1)):
		return 0, true, fmt.Errorf("metadata %s: %g (want a finite positive number)", key, v)
	case math.IsNaN(v) || math.IsInf(v, 0):
		return 0, true, fmt.Errorf("metadata %s: %g (want a finite number)", key, v)
	}
	return v, true, nil
}

// Bool returns a bool value.
func (g *File) Bool(key string) (bool, bool, error) {
	val, ok := g.Get(key)
	if !ok {
		return false, false, nil
	}
	b, isBool := val.V.(bool)
	if !isBool {
		return false, true, fmt.Errorf("metadata %s: want a bool, got %s", key, describe(val.V))
	}
	return b, true, nil
}

// String returns a string value.
func (g *File) String(key string) (string, bool, error) {
	val, ok := g.Get(key)
	if !ok {
		return "", false, nil
	}
	s, isString := val.V.(string)
	if !isString {
		return "", true, fmt.Errorf("metadata %s: want a string, got %s", key, describe(val.V))
	}
	return s, true, nil
}

// Strings returns an array of strings.
func (g *File) Strings(key string) ([]string, bool, error) {
	val, ok := g.Get(key)
	if !ok {
		return nil, false, nil
	}
	s, isStrings := val.V.([]string)
	if !isStrings {
		return nil, true, fmt.Errorf("metadata %s: want an array of strings, got %s", key, describe(val.V))
	}
	return s, true, nil
}

// Float32s returns an array of float32 values.
func (g *File) Float32s(key string) ([]float32, bool, error) {
	val, ok := g.Get(key)
	if !ok {
		return nil, false, nil
	}
	s, isFloats := val.V.([]float32)
	if !isFloats {
		return nil, true, fmt.Errorf("metadata %s: want an array of float32, got %s", key, describe(val.V))
	}
	return s, true, nil
}

// Ints returns an array of integers (any integer element type) as ints.
func (g *File) Ints(key string) ([]int, bool, error) {
	val, ok := g.Get(key)
	if !ok {
		return nil, false, nil
	}
	var out []int
	conv := func(n int, at func(int) int64) {
		out = make([]int, n)
		for i := range out {
			out[i] = int(at(i))
		}
	}
	switch s := val.V.(type) {
	case []int32:
		conv(len(s), func(i int) int64 { return int64(s[i]) })
	case []uint32:
		conv(len(s), func(i int) int64 { return int64(s[i]) })
	case []int8:
		conv(len(s), func(i int) int64 { return int64(s[i]) })
	case []uint8:
		conv(len(s), func(i int) int64 { return int64(s[i]) })
	case []int16:
		conv(len(s), func(i int) int64 { return int64(s[i]) })
	case []uint16:
		conv(len(s), func(i int) int64 { return int64(s[i]) })
	default:
		return nil, true, fmt.Errorf("metadata %s: want an array of 8-, 16- or 32-bit integers, got %s", key, describe(val.V))
	}
	return out, true, nil
}

// describe names a value's type for errors.
func describe(v any) string {
	switch x := v.(type) {
	case string:
		return "a string"
	case []Value:
		return "an array of arrays"
	case []string:
		return "an array of strings"
	case []byte:
		return "an array of uint8"
	case bool:
		return "a bool"
	default:
		return fmt.Sprintf("%T", x)
	}
}
