// Package utf8x holds what the standard library's unicode/utf8 does not say about UTF-8's byte structure: the
// range of a sequence's second byte, for code that validates UTF-8 a byte at a time (the tokenizer's decoder,
// the grammar's automaton).
package utf8x

// SecondByte gives the valid range of the byte after a lead byte and the sequence's length, 0 when lead starts no
// sequence (the bytes after the second are always 0x80..0xBF).
func SecondByte(lead byte) (lo, hi byte, n int) {
	switch {
	case lead >= 0xC2 && lead <= 0xDF:
		return 0x80, 0xBF, 2
	case lead == 0xE0:
		return 0xA0, 0xBF, 3
	case lead == 0xED:
		return 0x80, 0x9F, 3
	case lead >= 0xE1 && lead <= 0xEF:
		return 0x80, 0xBF, 3
	case lead == 0xF0:
		return 0x90, 0xBF, 4
	case lead >= 0xF1 && lead <= 0xF3:
		return 0x80, 0xBF, 4
	case lead == 0xF4:
		return 0x80, 0x8F, 4
	}
	return 0, 0, 0
}
