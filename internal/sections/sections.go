// Package sections names the section headings of TROUBLESHOOTING.md, the document that explains every warning and
// refusal layerstream prints, and builds the links to them. It is a leaf package (no imports from this module), so
// any package can name a section without importing guard and what guard brings with it.
package sections

import (
	"strings"
	"unicode"
)

// File is the document, at the repository root, whose section headings the constants below name.
const File = "TROUBLESHOOTING.md"

// Section headings of TROUBLESHOOTING.md. Warnings and errors name the section that explains them; a test checks
// that every constant is a heading of the document.
const (
	NaN              = "NaN or Inf in logits"
	Activations      = "Activations out of range"
	ZeroLogits       = "All-zero or constant logits"
	Saturation       = "Logit saturation"
	Repetition       = "Degenerate repetition"
	Punctuation      = "Output mostly one punctuation mark (!!!!)"
	DType            = "Choosing a dtype"
	Placement        = "Device placement across several devices"
	MissingFiles     = "Missing files"
	UnsupportedArch  = "Unsupported architecture"
	UnknownKey       = "Unknown config key"
	UnusedTensor     = "Unused tensor"
	MissingLMHead    = "Missing lm_head"
	GGUF             = "GGUF file refused"
	LlamaCpp         = "Different tokens from llama.cpp"
	GatedRepo        = "Gated or private repository"
	Offline          = "No network or offline"
	DiskFull         = "Disk full during split"
	OOM              = "Out of memory"
	LargerThanRAM    = "Model larger than memory"
	ResidentTooLarge = "--resident refused: the model does not fit in memory"
	Corrupt          = "Corrupted shard or checkpoint"
	SIGBUS           = "Crash with SIGBUS while generating"
	ContextTooLong   = "Context too long"
	Server           = "Server refuses a request"
	CUDASlow         = "CUDA slower than CPU on small models"
	CUDAPlugin       = "CUDA plugin not found"
	VerifyMismatch   = "verify reports a mismatch"
	KVCache          = "KV cache not filled, every step re-runs the whole forward"
	SlowEncoding     = "Slow with --encoding"
	Draft            = "Speculative decoding"
)

// All lists every section constant, in document order; a test checks it against the document's headings.
func All() []string {
	return []string{
		NaN, Activations, ZeroLogits, Saturation, Repetition, Punctuation,
		DType, Placement, MissingFiles, UnsupportedArch, UnknownKey,
		UnusedTensor, MissingLMHead, GGUF, LlamaCpp,
		GatedRepo, Offline, DiskFull, OOM, LargerThanRAM, ResidentTooLarge, Corrupt, SIGBUS, ContextTooLong,
		Server, CUDASlow, CUDAPlugin, VerifyMismatch, KVCache, SlowEncoding, Draft,
	}
}

// Anchor returns the link to a section, e.g. "TROUBLESHOOTING.md#nan-or-inf-in-logits", using the slug rule
// GitHub applies to Markdown headings (lower case, punctuation dropped, spaces to hyphens).
func Anchor(section string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(section) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return File + "#" + b.String()
}
