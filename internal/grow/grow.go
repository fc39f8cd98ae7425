// Package grow reuses scratch buffers: the project's one helper for "this buffer, n elements long".
package grow

// Slice returns s[:n] when s has the capacity, else a new slice of n zero elements. The contents of a reused
// s[:n] are whatever s held: callers overwrite them (or clear them) before reading.
func Slice[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
