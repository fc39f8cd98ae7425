// Package grammar constrains generation to JSON: a JSON Schema subset compiled into a character-level
// pushdown automaton (Schema, State), and a per-vocabulary index of token texts (Index) that turns an automaton
// state into the tokens allowed next (Constraint), so that a sampler can only produce text the schema accepts.
//
// The schema subset: type (object, array, string, number, integer, boolean, null, or a list of them),
// properties, required, additionalProperties (true or false), items, enum, const and anyOf (alternatives that
// begin differently: a string or null, an object or an array...); title, description, default, examples,
// $schema, $id and $comment are annotations. Any other keyword is refused by name (*Error).
//
// The text produced is compact JSON, with at most one space after a colon or a comma; objects hold only their
// declared properties (each at most once, required ones before the object closes), or any keys when none are
// declared.
package grammar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Error is a schema refused: Path locates the part at fault ("properties.a.minimum"), Keyword names the
// keyword when one is unsupported.
type Error struct {
	Path    string
	Keyword string
	Msg     string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return "JSON schema: " + e.Msg
	}
	return fmt.Sprintf("JSON schema: %s: %s", e.Path, e.Msg)
}

type kind uint8

const (
	kAny kind = iota
	kObject
	kArray
	kString
	kNumber
	kInteger
	kLiteral // enum, const, boolean, null: one of a set of JSON texts
	kUnion   // anyOf, a type list: the alternative is chosen by the value's first byte
	kCall    // a tool call: {"name": NAME, "arguments": the arguments of NAME's schema}
)

// node is a compiled schema.
type node struct {
	kind kind
	// object
	props    []*node
	names    []string
	keys     *lit   // the declared keys, JSON-encoded with their quotes; a leaf's index is the property's
	required uint64 // properties that must be written before the object closes
	free     bool   // any keys (values: any JSON)
	// array
	items *node
	// literal
	lits *lit
	// union; call: the arguments of each name
	alts  []*node
	first [256]bool // the bytes a value may begin with
}

// lit is a trie of JSON texts (enum values, object keys).
type lit struct {
	edges []litEdge
	end   bool
	index int    // at an end: the text's index
	mask  uint64 // object keys: the properties whose keys pass through here
}

type litEdge struct {
	b    byte
	next *lit
}

func (l *lit) child(b byte) *lit {
	for _, e := range l.edges {
		if e.b == b {
			return e.next
		}
	}
	return nil
}

func (l *lit) add(text string, index int) {
	n := l
	n.mask |= 1 << uint(index%64)
	for i := 0; i < len(text); i++ {
		c := n.child(text[i])
		if c == nil {
			c = &lit{}
			n.edges = append(n.edges, litEdge{text[i], c})
		}
		c.mask |= 1 << uint(index%64)
		n = c
	}
	n.end, n.index = true, index
}

// Schema is a compiled JSON schema, safe for concurrent use.
type Schema struct {
	root *node
}

// Limits of a schema.
const (
	MaxDepth      = 32 // nesting of schemas
	MaxProperties = 64 // per object
	MaxSchemaSize = 1 << 16
)

var annotations = []string{"title", "description", "default", "examples", "$schema", "$id", "$comment"}
var known = []string{"type", "properties", "required", "additionalProperties", "items", "enum", "const", "anyOf"}

// cache holds the schemas compiled, by their compact text; schemas come from requests, so it is bounded
// (emptied when full).
var cache = struct {
	sync.Mutex
	m map[string]*Schema
}{m: map[string]*Schema{}}

const maxCachedSchemas = 256

// Compile compiles a JSON schema (the JSON text). Schemas are cached by their compact text.
func Compile(schema []byte) (*Schema, error) {
	if len(schema) > MaxSchemaSize {
		return nil, &Error{Msg: fmt.Sprintf("the schema is %d bytes, more than %d", len(schema), MaxSchemaSize)}
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, schema); err != nil {
		return nil, &Error{Msg: "not JSON: " + err.Error()}
	}
	key := buf.String()
	cache.Lock()
	s, ok := cache.m[key]
	cache.Unlock()
	if ok {
		return s, nil
	}
	d := json.NewDecoder(bytes.NewReader(schema))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, &Error{Msg: "not JSON: " + err.Error()}
	}
	root, err := compile(v, "", 0)
	if err != nil {
		return nil, err
	}
	s = &Schema{root: root}
	cache.Lock()
	if len(cache.m) >= maxCachedSchemas {
		clear(cache.m)
	}
	cache.m[key] = s
	cache.Unlock()
	return s, nil
}

// MustCompile is Compile for schemas known to be valid; it panics on error.
func MustCompile(schema string) *Schema {
	s, err := Compile([]byte(schema))
	if err != nil {
		panic(err)
	}
	return s
}

// AnyJSON accepts any JSON value; AnyObject any JSON object (OpenAI's response_format json_object).
var (
	AnyJSON   = &Schema{root: anyNode}
	AnyObject = &Schema{root: freeObject}
)

var (
	anyNode    = withFirst(&node{kind: kAny})
	freeObject = withFirst(&node{kind: kObject, free: true})
	freeArray  = withFirst(&node{kind: kArray, items: anyNode})
	anyString  = withFirst(&node{kind: kString})
	anyNumber  = withFirst(&node{kind: kNumber})
	anyLits    = literals([]string{"true", "false", "null"})
)

func literals(texts []string) *node {
	n := &node{kind: kLiteral, lits: &lit{}}
	for i, t := range texts {
		n.lits.add(t, i)
	}
	return withFirst(n)
}

func withFirst(n *node) *node {
	switch n.kind {
	case kAny:
		for _, c := range "{[\"-0123456789tfn" {
			n.first[c] = true
		}
	case kObject, kCall:
		n.first['{'] = true
	case kArray:
		n.first['['] = true
	case kString:
		n.first['"'] = true
	case kNumber, kInteger:
		for _, c := range "-0123456789" {
			n.first[c] = true
		}
	case kLiteral:
		for _, e := range n.lits.edges {
			n.first[e.b] = true
		}
	case kUnion:
		for _, a := range n.alts {
			for b, ok := range a.first {
				n.first[b] = n.first[b] || ok
			}
		}
	}
	return n
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func compile(v any, path string, depth int) (*node, error) {
	if depth > MaxDepth {
		return nil, &Error{Path: path, Msg: fmt.Sprintf("nested more than %d deep", MaxDepth)}
	}
	switch v := v.(type) {
	case bool:
		if v {
			return anyNode, nil
		}
		return nil, &Error{Path: path, Msg: "the schema false accepts nothing"}
	case map[string]any:
		return compileObject(v, path, depth)
	}
	return nil, &Error{Path: path, Msg: "a schema is an object (or true)"}
}

func compileObject(m map[string]any, path string, depth int) (*node, error) {
	for _, k := range slices.Sorted(mapKeys(m)) {
		if !slices.Contains(known, k) && !slices.Contains(annotations, k) {
			return nil, &Error{Path: join(path, k), Keyword: k, Msg: fmt.Sprintf("the keyword %q is not supported (supported: %s)", k, strings.Join(known, ", "))}
		}
	}
	if c, ok := m["const"]; ok {
		return literalNode([]any{c})
	}
	if e, ok := m["enum"]; ok {
		list, ok := e.([]any)
		if !ok || len(list) == 0 {
			return nil, &Error{Path: join(path, "enum"), Msg: "enum is a non-empty array"}
		}
		return literalNode(list)
	}
	if a, ok := m["anyOf"]; ok {
		list, ok := a.([]any)
		if !ok || len(list) == 0 {
			return nil, &Error{Path: join(path, "anyOf"), Msg: "anyOf is a non-empty array of schemas"}
		}
		if m["type"] != nil {
			return nil, &Error{Path: join(path, "anyOf"), Keyword: "anyOf", Msg: "anyOf beside type is not supported: put the type in each alternative"}
		}
		var alts []*node
		for i, s := range list {
			n, err := compile(s, fmt.Sprintf("%s[%d]", join(path, "anyOf"), i), depth+1)
			if err != nil {
				return nil, err
			}
			alts = append(alts, n)
		}
		return union(alts, join(path, "anyOf"))
	}
	var types []string
	switch t := m["type"].(type) {
	case nil:
	case string:
		types = []string{t}
	case []any:
		for _, x := range t {
			s, ok := x.(string)
			if !ok {
				return nil, &Error{Path: join(path, "type"), Msg: "type is a string or an array of strings"}
			}
			types = append(types, s)
		}
		if len(types) == 0 {
			return nil, &Error{Path: join(path, "type"), Msg: "type is an empty array"}
		}
	default:
		return nil, &Error{Path: join(path, "type"), Msg: "type is a string or an array of strings"}
	}
	if types == nil {
		if _, ok := m["properties"]; ok {
			types = []string{"object"}
		} else if _, ok := m["items"]; ok {
			types = []string{"array"}
		} else {
			return anyNode, nil
		}
	}
	var alts []*node
	for _, t := range types {
		n, err := typed(t, m, path, depth)
		if err != nil {
			return nil, err
		}
		alts = append(alts, n)
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return union(alts, join(path, "type"))
}

func typed(t string, m map[string]any, path string, depth int) (*node, error) {
	switch t {
	case "string":
		return anyString, nil
	case "number":
		return anyNumber, nil
	case "integer":
		return withFirst(&node{kind: kInteger}), nil
	case "boolean":
		return literals([]string{"true", "false"}), nil
	case "null":
		return literals([]string{"null"}), nil
	case "array":
		n := &node{kind: kArray, items: anyNode}
		if it, ok := m["items"]; ok {
			if _, tuple := it.([]any); tuple {
				return nil, &Error{Path: join(path, "items"), Keyword: "items", Msg: "items as an array (a tuple) is not supported: give one schema"}
			}
			var err error
			if n.items, err = compile(it, join(path, "items"), depth+1); err != nil {
				return nil, err
			}
		}
		return withFirst(n), nil
	case "object":
		return objectNode(m, path, depth)
	}
	return nil, &Error{Path: join(path, "type"), Msg: fmt.Sprintf("unknown type %q (object, array, string, number, integer, boolean, null)", t)}
}

func objectNode(m map[string]any, path string, depth int) (*node, error) {
	n := &node{kind: kObject}
	additional := true
	if a, ok := m["additionalProperties"]; ok {
		b, ok := a.(bool)
		if !ok {
			return nil, &Error{Path: join(path, "additionalProperties"), Keyword: "additionalProperties", Msg: "additionalProperties as a schema is not supported: give true or false"}
		}
		additional = b
	}
	props := map[string]any{}
	if p, ok := m["properties"]; ok {
		if props, ok = p.(map[string]any); !ok {
			return nil, &Error{Path: join(path, "properties"), Msg: "properties is an object"}
		}
	}
	var required []string
	if r, ok := m["required"]; ok {
		list, ok := r.([]any)
		if !ok {
			return nil, &Error{Path: join(path, "required"), Msg: "required is an array of strings"}
		}
		for _, x := range list {
			s, ok := x.(string)
			if !ok {
				return nil, &Error{Path: join(path, "required"), Msg: "required is an array of strings"}
			}
			if _, declared := props[s]; !declared {
				if !additional {
					return nil, &Error{Path: join(path, "required"), Msg: fmt.Sprintf("%q is required but not among the properties, and additionalProperties is false", s)}
				}
				props[s] = true
			}
			required = append(required, s)
		}
	}
	if len(props) == 0 {
		if additional {
			return freeObject, nil
		}
		return withFirst(n), nil // {} only
	}
	if len(props) > MaxProperties {
		return nil, &Error{Path: join(path, "properties"), Msg: fmt.Sprintf("at most %d properties per object, got %d", MaxProperties, len(props))}
	}
	n.keys = &lit{}
	names := slices.Sorted(mapKeys(props))
	// Declared order is lost in a Go map; keep the schema's order where we can: sorted names are stable.
	for i, name := range names {
		p, err := compile(props[name], join(join(path, "properties"), name), depth+1)
		if err != nil {
			return nil, err
		}
		n.props = append(n.props, p)
		n.names = append(n.names, name)
		n.keys.add(encode(name), i)
		if slices.Contains(required, name) {
			n.required |= 1 << uint(i)
		}
	}
	return withFirst(n), nil
}

func mapKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// encode is the compact JSON text of v (HTML characters unescaped, object keys sorted).
func encode(v any) string {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	e.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}

func literalNode(values []any) (*node, error) {
	texts := make([]string, 0, len(values))
	for _, v := range values {
		t := encode(v)
		if !slices.Contains(texts, t) {
			texts = append(texts, t)
		}
	}
	// A text that is a prefix of another is only ambiguous for numbers (1 and 12), which the automaton handles.
	sort.Strings(texts)
	return literals(texts), nil
}

// union makes the alternatives one node, chosen by the first byte of the value: they must begin differently.
func union(alts []*node, path string) (*node, error) {
	var flat []*node
	for _, a := range alts {
		if a.kind == kUnion {
			flat = append(flat, a.alts...)
		} else {
			flat = append(flat, a)
		}
	}
	// Literal alternatives merge into one set.
	var lits []string
	var rest []*node
	for _, a := range flat {
		if a.kind == kLiteral {
			lits = append(lits, litTexts(a.lits, "")...)
		} else {
			rest = append(rest, a)
		}
	}
	if len(lits) > 0 {
		rest = append(rest, literals(uniqueSorted(lits)))
	}
	if len(rest) == 1 {
		return rest[0], nil
	}
	for i, a := range rest {
		for _, b := range rest[:i] {
			for c := range 256 {
				if a.first[c] && b.first[c] {
					return nil, &Error{Path: path, Keyword: "anyOf", Msg: fmt.Sprintf("alternatives that can begin alike (both with %q: two objects, two arrays, a string and a string enum...) are not supported", string(rune(c)))}
				}
			}
		}
	}
	return withFirst(&node{kind: kUnion, alts: rest}), nil
}

func uniqueSorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

func litTexts(l *lit, prefix string) []string {
	var out []string
	if l.end {
		out = append(out, prefix)
	}
	for _, e := range l.edges {
		out = append(out, litTexts(e.next, prefix+string([]byte{e.b}))...)
	}
	return out
}

// Call is a tool call's grammar: {"name": "NAME", "arguments": ARGS} with NAME one of names and ARGS a value
// of the schema of that name (args, in the same order; nil: any object). The arguments' schema follows the
// name, which comes first: a call of any of several tools keeps to its own tool's parameters.
func Call(names []string, args []*Schema) (*Schema, error) {
	if len(names) == 0 || len(names) != len(args) {
		return nil, &Error{Msg: "a call needs one arguments schema per tool name"}
	}
	n := &node{kind: kCall, lits: &lit{}}
	for i, name := range names {
		n.lits.add(`{"name": `+encode(name)+`, "arguments": `, i)
		a := freeObject
		if args[i] != nil {
			a = args[i].root
		}
		n.alts = append(n.alts, a)
	}
	return &Schema{root: withFirst(n)}, nil
}
