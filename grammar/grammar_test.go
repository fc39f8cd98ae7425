package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

const personSchema = `{"type": "object", "properties": {
	"name": {"type": "string"},
	"age": {"type": "integer"},
	"height": {"type": "number"},
	"tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b<c", "d\"e"]}},
	"kind": {"const": "person"},
	"pet": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"legs": {"type": "integer"}}, "required": ["legs"], "additionalProperties": false}]},
	"ok": {"type": "boolean"},
	"extra": {}
}, "required": ["name", "age", "kind"], "additionalProperties": false}`

func TestMatch(t *testing.T) {
	s := MustCompile(personSchema)
	good := []string{
		`{"name":"Ann","age":3,"kind":"person"}`,
		`{"kind": "person", "age": -0, "name": "\u00e9\n", "tags":["b<c", "d\"e"], "pet":null}`,
		`{"age":12,"name":"é日本","kind":"person","pet":{"legs":4},"height":1.5e+3,"ok":false,"extra":[1,{"x":[]},"y",true,null]}`,
	}
	for _, g := range good {
		if !s.Match(g) {
			t.Errorf("refused %s", g)
		}
	}
	bad := []string{
		`{"name":"Ann","age":3}`,                              // kind missing
		`{"name":"Ann","age":3.5,"kind":"person"}`,            // not an integer
		`{"name":"Ann","age":3,"kind":"person","zzz":1}`,      // not declared
		`{"name":"Ann","name":"B","age":3,"kind":"person"}`,   // twice
		`{"name":"Ann","age":03,"kind":"person"}`,             // leading zero
		`{"name":"A` + "\n" + `","age":3,"kind":"person"}`,    // control character
		`{"name":"Ann","age":3,"kind":"person","tags":["x"]}`, // not in the enum
		`{"name":"Ann","age":3,"kind":"person","pet":{}}`,     // legs required
		`{"name":"\xff","age":3,"kind":"person"}`,             // not UTF-8
		`{"name":"Ann","age":3,"kind":"person"} `,             // trailing
		` {"name":"Ann","age":3,"kind":"person"}`,
		`{"name":"Ann","age":3,"kind":"person",}`,
	}
	for _, b := range bad {
		if s.Match(b) {
			t.Errorf("accepted %s", b)
		}
	}
	if !AnyJSON.Match(`12`) || !AnyJSON.Match(`-1.5E-2`) || AnyJSON.Match(`1.`) || !AnyObject.Match(`{"a":{"b":[1,2]}}`) || AnyObject.Match(`[]`) {
		t.Error("any")
	}
	if n := MustCompile(`{"enum": [1, 12, "x"]}`); !n.Match("1") || !n.Match("12") || n.Match("13") || !n.Match(`"x"`) {
		t.Error("numeric enum")
	}
}

func TestCompileRefuses(t *testing.T) {
	for schema, keyword := range map[string]string{
		`{"type": "string", "minLength": 2}`:                             "minLength",
		`{"type": "object", "properties": {"a": {"maximum": 3}}}`:        "maximum",
		`{"$ref": "#/$defs/a"}`:                                          "$ref",
		`{"anyOf": [{"type": "object"}, {"type": "object"}]}`:            "anyOf",
		`{"type": "object", "additionalProperties": {"type": "string"}}`: "additionalProperties",
		`{"type": "array", "items": [{"type": "string"}]}`:               "items",
	} {
		_, err := Compile([]byte(schema))
		var e *Error
		if !errors.As(err, &e) || e.Keyword != keyword {
			t.Errorf("%s: got %v, want the keyword %q named", schema, err, keyword)
		}
	}
	for _, schema := range []string{`false`, `3`, `{"type": "blob"}`, `{"enum": []}`, `{"type": "object", "required": ["x"], "additionalProperties": false}`, `{`} {
		if _, err := Compile([]byte(schema)); err == nil {
			t.Errorf("%s: compiled", schema)
		}
	}
}

// validate checks v against a schema of the subset, independently of the automaton.
func validate(v any, schema any) bool {
	m, ok := schema.(map[string]any)
	if !ok {
		return schema == true
	}
	if c, ok := m["const"]; ok {
		return equal(v, c)
	}
	if e, ok := m["enum"]; ok {
		return slices.ContainsFunc(e.([]any), func(x any) bool { return equal(v, x) })
	}
	if alts, ok := m["anyOf"]; ok {
		return slices.ContainsFunc(alts.([]any), func(a any) bool { return validate(v, a) })
	}
	t, _ := m["type"].(string)
	if t == "" {
		if _, ok := m["properties"]; ok {
			t = "object"
		}
	}
	switch t {
	case "":
		return true
	case "string":
		_, ok := v.(string)
		return ok
	case "number":
		_, ok := v.(json.Number)
		return ok
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		_, err := n.Int64()
		return err == nil || !strings.ContainsAny(string(n), ".eE")
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "null":
		return v == nil
	case "array":
		a, ok := v.([]any)
		if !ok {
			return false
		}
		for _, x := range a {
			if items, has := m["items"]; has && !validate(x, items) {
				return false
			}
		}
		return true
	case "object":
		o, ok := v.(map[string]any)
		if !ok {
			return false
		}
		props, _ := m["properties"].(map[string]any)
		for k, x := range o {
			p, has := props[k]
			if !has {
				if m["additionalProperties"] == false {
					return false
				}
				continue
			}
			if !validate(x, p) {
				return false
			}
		}
		req, _ := m["required"].([]any)
		for _, r := range req {
			if _, has := o[r.(string)]; !has {
				return false
			}
		}
		return true
	}
	return false
}

func equal(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func decode(t testing.TB, s string) any {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	if d.More() {
		t.Fatalf("%q: trailing data", s)
	}
	return v
}

// syntheticVocab is a vocabulary of single bytes, JSON pieces and junk, with a stop token (id 0, no text).
func syntheticVocab() []string {
	v := []string{""}
	for c := 0x20; c < 0x7f; c++ {
		v = append(v, string(rune(c)))
	}
	v = append(v, "\n", "\xc3", "\xa9", "\xe6\x97\xa5", "é", `{"`, `":`, `","`, `"}`, `name`, `age`, `kind`, `person`, `": "`,
		`true`, `false`, `null`, `nu`, `ll`, `12`, `3.5`, `e+`, `[]`, `{}`, `[{"`, `"]`, `legs`, `pet`, `tags`, `b<c`, `\"`, `\u00`, `\ud83d`,
		"\xff", "ab\x01", `"person"}`, ` "`, `, "`, `d\"e"`)
	return v
}

func syntheticIndex(vocab []string) *Index {
	return NewIndex(len(vocab), func(id int) ([]byte, bool) {
		if vocab[id] == "" {
			return nil, false
		}
		return []byte(vocab[id]), true
	})
}

// TestConstrainedRandom samples random tokens under constraints: every text ending in the stop token parses
// and validates against its schema.
func TestConstrainedRandom(t *testing.T) {
	vocab := syntheticVocab()
	x := syntheticIndex(vocab)
	schemas := []string{personSchema, `{"type": "array", "items": {"type": "integer"}}`, `{"type": ["string", "null", "number"]}`,
		`{}`, `{"type": "object"}`, `{"enum": ["a", 1, 12, true, {"b": [null]}]}`}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, schemaText := range schemas {
		s := MustCompile(schemaText)
		schema := decode(t, schemaText)
		finished := 0
		for run := 0; run < 300; run++ {
			c := NewConstraint(s, x)
			logits := make([]float32, len(vocab))
			var text strings.Builder
			for step := 0; step < 200; step++ {
				for i := range logits {
					logits[i] = float32(rng.NormFloat64())
				}
				logits[0] += float32(step) / 20 // the stop token grows likelier
				c.Allow(logits, []int{0})
				best, bestScore := -1, float32(math.Inf(-1))
				for i, l := range logits {
					if l > bestScore {
						best, bestScore = i, l
					}
				}
				if best < 0 {
					t.Fatalf("%s: nothing allowed after %q", schemaText, text.String())
				}
				if err := c.Accept(best); err != nil {
					t.Fatal(err)
				}
				if best == 0 {
					finished++
					v := decode(t, text.String())
					if !validate(v, schema) {
						t.Fatalf("%s: %s does not validate", schemaText, text.String())
					}
					break
				}
				text.WriteString(vocab[best])
			}
		}
		if finished == 0 {
			t.Errorf("%s: no run finished", schemaText)
		}
	}
}

func FuzzCompile(f *testing.F) {
	for _, s := range []string{personSchema, `{}`, `{"type":"array","items":{"anyOf":[{"type":"string"},{"type":"null"}]}}`, `{"enum":[1,"a",null]}`, `true`} {
		f.Add(s, `{"name":"x","age":1,"kind":"person"}`)
	}
	f.Fuzz(func(t *testing.T, schema, text string) {
		s, err := Compile([]byte(schema))
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error not *Error: %v", err)
			}
			return
		}
		if s.Match(text) {
			var v any
			if json.Unmarshal([]byte(text), &v) != nil {
				t.Fatalf("matched %q, not JSON", text)
			}
		}
	})
}

func TestCall(t *testing.T) {
	s, err := Call([]string{"get_weather", "f"}, []*Schema{MustCompile(`{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}`), nil})
	if err != nil {
		t.Fatal(err)
	}
	for text, want := range map[string]bool{
		`{"name": "get_weather", "arguments": {"city":"Paris"}}`: true,
		`{"name": "get_weather", "arguments": {}}`:               false,
		`{"name": "f", "arguments": {"x":[1]}}`:                  true,
		`{"name": "g", "arguments": {}}`:                         false,
		`{"name": "f", "arguments": 3}`:                          false,
		`{"name": "f", "arguments": {}} `:                        false,
	} {
		if s.Match(text) != want {
			t.Errorf("%s: %v", text, !want)
		}
	}
}
