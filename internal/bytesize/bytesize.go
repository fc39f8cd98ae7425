// Package bytesize formats and parses byte counts: the project's one place for "12.3 MB" and "24GiB".
package bytesize

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Format writes n in decimal units, as disks and the Hugging Face Hub count: "512 B", "12.3 kB", "88.1 MB",
// "1.94 GB", "2.20 TB"; a negative n (unknown) is "?".
func Format(n int64) string {
	switch {
	case n < 0:
		return "?"
	case n < 1000:
		return fmt.Sprintf("%d B", n)
	case n < 1e6:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	case n < 1e9:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n < 1e12:
		return fmt.Sprintf("%.2f GB", float64(n)/1e9)
	}
	return fmt.Sprintf("%.2f TB", float64(n)/1e12)
}

// FormatBinary writes n in binary units, as memory is sized: "512 B", "1.5 KiB", "24.0 GiB"; negative is "?".
func FormatBinary(n int64) string {
	if n < 0 {
		return "?"
	}
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for v >= 1024 && i < 4 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTP"[i])
}

var suffixes = []struct {
	suffix string
	mult   float64
}{
	{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"TIB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, // as dd and sort -S read them
	{"B", 1},
}

// Parse reads a byte count: a number (decimals allowed) with an optional unit, case-insensitive: B; kB, MB,
// GB, TB (powers of 1000); KiB, MiB, GiB, TiB and the bare K, M, G, T (powers of 1024). "8GiB", "512 MB",
// "1.5G", "4096". The count must be positive and fit an int64.
func Parse(s string) (int64, error) {
	num, mult := strings.TrimSpace(s), 1.0
	upper := strings.ToUpper(num)
	for _, u := range suffixes {
		if strings.HasSuffix(upper, u.suffix) {
			num, mult = strings.TrimSpace(num[:len(num)-len(u.suffix)]), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || v*mult < 1 || v*mult >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q: want a positive number of bytes with an optional unit, e.g. 8GiB, 512MB or 4096", s)
	}
	return int64(v * mult), nil
}
