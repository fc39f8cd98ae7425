package engine

import (
	"github.com/layerstream/layerstream/grammar"
)

// GrammarIndex returns the model's vocabulary as a grammar.Index (the bytes each token adds to a text; added
// tokens left out), built on first use.
func (e *Engine) GrammarIndex() (*grammar.Index, error) {
	tok, err := e.Tokenizer()
	if err != nil {
		return nil, err
	}
	e.grammarOnce.Do(func() {
		e.grammarIndex = grammar.NewIndex(e.cfg.VocabSize, tok.TokenBytes)
	})
	return e.grammarIndex, nil
}

// JSONConstraint returns a Constraint keeping one generation to the JSON values of s (grammar.AnyJSON,
// grammar.AnyObject, or a compiled schema): the text it lets through is a whole value when the sequence ends
// with a stop token.
func (e *Engine) JSONConstraint(s *grammar.Schema) (Constraint, error) {
	x, err := e.GrammarIndex()
	if err != nil {
		return nil, err
	}
	return grammar.NewConstraint(s, x), nil
}
