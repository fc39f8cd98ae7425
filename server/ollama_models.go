package server

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// ollamaVersion is the Ollama API version /api/version reports: the one whose shapes this server follows
// (the ollama Python package 0.6 reads them).
const ollamaVersion = "0.6.0"

// modelFacts describe the served model for Ollama's /api/tags and /api/show and the chat page's /api/info,
// read once when the server starts.
type modelFacts struct {
	size     int64     // bytes of the shard folder
	modified time.Time // the shard folder's modification time
	family   string    // config.json's model_type
	layers   int
	hidden   int
	context  int // positions a sequence may hold
	dtype    string
	digest   string
}

func (s *Server) readFacts() modelFacts {
	e := s.cfg.Engine
	cfg := e.Config()
	f := modelFacts{family: cfg.ModelType, layers: cfg.NumHiddenLayers, hidden: cfg.HiddenSize, context: e.ContextLength(), dtype: cfg.TorchDType}
	if fi, err := os.Stat(e.Dir()); err == nil {
		f.modified = fi.ModTime().UTC()
	}
	filepath.WalkDir(e.Dir(), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				f.size += fi.Size()
			}
		}
		return nil
	})
	sum := sha256.Sum256([]byte(s.cfg.ModelID + "\x00" + e.Dir()))
	f.digest = hex.EncodeToString(sum[:])
	return f
}

// ollamaDetails is a model's "details" in /api/tags and /api/show.
func (s *Server) ollamaDetails() map[string]any {
	f := s.facts
	return map[string]any{"parent_model": "", "format": "safetensors", "family": f.family, "families": []string{f.family},
		"parameter_size": "", "quantization_level": f.dtype}
}

// ollamaTags answers GET /api/tags: the one model, named with Ollama's tag ":latest".
func (s *Server) ollamaTags(w http.ResponseWriter, r *http.Request) {
	name := s.cfg.ModelID + ":latest"
	writeJSON(w, http.StatusOK, map[string]any{"models": []any{map[string]any{
		"name": name, "model": name, "modified_at": s.facts.modified.Format(time.RFC3339Nano), "size": s.facts.size,
		"digest": s.facts.digest, "details": s.ollamaDetails()}}})
}

// ollamaShow answers POST /api/show {"model": NAME}: the model's details, and in model_info its architecture,
// context length, layers and width under Ollama's key names.
func (s *Server) ollamaShow(w http.ResponseWriter, r *http.Request) {
	d := ollama{}
	body, err := s.readBody(w, r)
	if err != nil {
		writeErrorAs(w, d, err.(*requestError))
		return
	}
	fields, err := parseFields(body, "", []string{"model", "name", "verbose"})
	if err != nil {
		writeErrorAs(w, d, err.(*requestError))
		return
	}
	p := parser{fields: fields}
	var model, name string
	var verbose bool
	p.str("model", &model)
	p.str("name", &name) // the older spelling
	p.boolean("verbose", &verbose)
	if model == "" {
		model = name
	}
	switch {
	case p.err != nil:
		writeErrorAs(w, d, p.err.(*requestError))
		return
	case model == "":
		writeErrorAs(w, d, badField("model", "model is required"))
		return
	case !s.knownModel(model):
		writeErrorAs(w, d, s.unknownModel(model))
		return
	}
	f := s.facts
	writeJSON(w, http.StatusOK, map[string]any{"modelfile": "", "parameters": "", "template": "", "license": "",
		"details": s.ollamaDetails(), "modified_at": f.modified.Format(time.RFC3339Nano), "capabilities": []string{"completion"},
		"model_info": map[string]any{"general.architecture": f.family, f.family + ".context_length": f.context,
			f.family + ".block_count": f.layers, f.family + ".embedding_length": f.hidden}})
}

// ollamaVersionInfo answers GET /api/version.
func (s *Server) ollamaVersionInfo(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": ollamaVersion})
}
