package queue

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/layerstream/layerstream/batchfile"
	"github.com/layerstream/layerstream/engine"
)

// Settings are a job's defaults for its lines, submit's flags: what generate's flags are to --batch-file. A nil
// sampling field takes the model's generation_config.json value on the worker.
type Settings struct {
	MaxNewTokens      int      `json:"max_new_tokens"`
	Temperature       *float64 `json:"temperature,omitempty"`
	TopK              *int     `json:"top_k,omitempty"`
	TopP              *float64 `json:"top_p,omitempty"`
	RepetitionPenalty *float64 `json:"repetition_penalty,omitempty"`
	// Seed is the job's seed: line n samples with Seed + n - 1 unless it names its own (batchfile.Line.SeedFor).
	Seed uint64 `json:"seed"`
	// Chat wraps text prompts in the model's chat template; Strict ends a line whose guards see broken output.
	Chat   bool `json:"chat,omitempty"`
	Strict bool `json:"strict,omitempty"`
}

// run is the batchfile.Settings of the job on engine e: the model's sampling defaults with the job's over them.
func (s Settings) run(e *engine.Engine) batchfile.Settings {
	sm := e.DefaultSampling()
	if s.Temperature != nil {
		sm.Temperature = *s.Temperature
	}
	if s.TopK != nil {
		sm.TopK = *s.TopK
	}
	if s.TopP != nil {
		sm.TopP = engine.ExplicitTopP(*s.TopP)
	}
	if s.RepetitionPenalty != nil {
		sm.RepetitionPenalty = *s.RepetitionPenalty
	}
	sm.Seed = s.Seed
	return batchfile.Settings{MaxNewTokens: s.MaxNewTokens, Sampling: sm, Chat: s.Chat}
}

// Prompt is the body of a prompt message: one line of a batch file with its job's settings.
type Prompt struct {
	// ID is "<job>.<line>" (JobID, the line's number): the message id, and the result's id and subject.
	ID string `json:"id"`
	// Line is the line's 1-based number in the file; Request the line as it is there.
	Line     int             `json:"line"`
	Request  json.RawMessage `json:"request"`
	Settings Settings        `json:"settings"`
}

// decodePrompt parses a prompt message's body.
func decodePrompt(b []byte) (Prompt, error) {
	var p Prompt
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("prompt message: %w", err)
	}
	if p.ID == "" || p.Line < 1 || len(p.Request) == 0 {
		return p, fmt.Errorf("prompt message: want an id, a line number and a request, got %.200s", b)
	}
	return p, nil
}

// JobID names a batch file's run: 16 hex digits of the SHA-256 of the file's content and the job's settings, so
// that submitting the same file with the same settings again gives the same ids (and publishes nothing twice).
func JobID(content []byte, s Settings) string {
	h := sha256.New()
	h.Write(content)
	js, _ := json.Marshal(s) // (a struct of numbers and booleans: cannot fail)
	h.Write(js)
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// ContentSeed is the job seed of a batch file submitted without --seed: taken from its content, so that a
// resubmission samples as the first submission did.
func ContentSeed(content []byte) uint64 {
	sum := sha256.Sum256(content)
	return binary.LittleEndian.Uint64(sum[:8])
}

// lineID is the id of line n of job.
func lineID(job string, n int) string { return fmt.Sprintf("%s.%d", job, n) }
