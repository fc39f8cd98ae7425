package guard

import (
	"strings"
	"unicode"
)

// TroubleshootingFile is the document, at the repository root, whose section headings the constants below name.
const TroubleshootingFile = "TROUBLESHOOTING.md"

// Section headings of TROUBLESHOOTING.md. Warnings and errors name the section that explains them; a test checks
// that every constant is a heading of the document.
const (
	SectionNaN              = "NaN or Inf in logits"
	SectionActivations      = "Activations out of range"
	SectionZeroLogits       = "All-zero or constant logits"
	SectionSaturation       = "Logit saturation"
	SectionRepetition       = "Degenerate repetition"
	SectionPunctuation      = "Output mostly one punctuation mark (!!!!)"
	SectionDType            = "Choosing a dtype"
	SectionPlacement        = "Device placement across several devices"
	SectionMissingFiles     = "Missing files"
	SectionUnsupportedArch  = "Unsupported architecture"
	SectionUnknownKey       = "Unknown config key" // written out in checkpoint's error (checkpoint cannot import guard)
	SectionUnusedTensor     = "Unused tensor"
	SectionMissingLMHead    = "Missing lm_head"
	SectionGGUF             = "GGUF file refused"
	SectionLlamaCpp         = "Different tokens from llama.cpp"
	SectionGatedRepo        = "Gated or private repository"
	SectionOffline          = "No network or offline"
	SectionDiskFull         = "Disk full during split"
	SectionOOM              = "Out of memory"
	SectionLargerThanRAM    = "Model larger than memory"
	SectionResidentTooLarge = "--resident refused: the model does not fit in memory"
	SectionCorrupt          = "Corrupted shard or checkpoint"
	SectionSIGBUS           = "Crash with SIGBUS while generating"
	SectionContextTooLong   = "Context too long"
	SectionServer           = "Server refuses a request"
	SectionCUDASlow         = "CUDA slower than CPU on small models"
	SectionCUDAPlugin       = "CUDA plugin not found"
	SectionVerifyMismatch   = "verify reports a mismatch"
	SectionKVCache          = "KV cache not filled, every step re-runs the whole forward"
	SectionSlowEncoding     = "Slow with --encoding"
)

// Sections lists every section constant, in document order.
func Sections() []string {
	return []string{
		SectionNaN, SectionActivations, SectionZeroLogits, SectionSaturation, SectionRepetition, SectionPunctuation,
		SectionDType, SectionPlacement, SectionMissingFiles, SectionUnsupportedArch, SectionUnknownKey,
		SectionUnusedTensor, SectionMissingLMHead, SectionGGUF, SectionLlamaCpp,
		SectionGatedRepo, SectionOffline, SectionDiskFull, SectionOOM, SectionLargerThanRAM, SectionResidentTooLarge, SectionCorrupt, SectionSIGBUS, SectionContextTooLong,
		SectionServer, SectionCUDASlow, SectionCUDAPlugin, SectionVerifyMismatch, SectionKVCache, SectionSlowEncoding,
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
	return TroubleshootingFile + "#" + b.String()
}
