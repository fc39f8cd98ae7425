package bytesize

import "testing"

func TestFormat(t *testing.T) {
	for n, want := range map[int64]string{-1: "?", 0: "0 B", 999: "999 B", 1000: "1.0 kB", 6e6: "6.0 MB", 1_940_000_000: "1.94 GB", 2.2e12: "2.20 TB"} {
		if got := Format(n); got != want {
			t.Errorf("Format(%d) = %q, want %q", n, got, want)
		}
	}
	for n, want := range map[int64]string{-5: "?", 1023: "1023 B", 1536: "1.5 KiB", 24 << 30: "24.0 GiB"} {
		if got := FormatBinary(n); got != want {
			t.Errorf("FormatBinary(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestParse(t *testing.T) {
	for s, want := range map[string]int64{"4096": 4096, "8GiB": 8 << 30, "8gib": 8 << 30, "512MB": 512e6, "512 MB": 512e6,
		"1.5G": 3 << 29, "2kB": 2000, "10 B": 10, " 3 TiB ": 3 << 40} {
		if got, err := Parse(s); err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "GiB", "-1GB", "0", "lots", "1e30TB", "NaN", "Inf"} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) succeeded", s)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("8GiB")
	f.Add("1.5 mb")
	f.Fuzz(func(t *testing.T, s string) {
		n, err := Parse(s)
		if err == nil && n < 0 {
			t.Fatalf("Parse(%q) = %d", s, n)
		}
	})
}
