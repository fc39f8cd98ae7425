package grammar

import "github.com/layerstream/layerstream/internal/utf8x"

// The automaton reads the JSON text byte by byte. Its state is the frame of the innermost value being read and a
// stack of the frames around it (immutable, shared between states): a State is a small comparable value, so
// that stepping it allocates only when a value opens inside another, and states can key a cache.

type fkind uint8

const (
	fStart   fkind = iota // before the top-level value
	fObject               // inside an object
	fArray                // inside an array
	fString               // inside a string
	fNumber               // inside a number
	fLiteral              // inside one of a set of literal texts
	fDone                 // the top-level value is complete
	fCall                 // inside a tool call: its name (lit), its arguments (prop), its end
)

// Call phases.
const (
	cName uint8 = iota
	cArgs
	cClose
)

// Object phases.
const (
	oOpen    uint8 = iota // after '{'
	oKey                  // in a key (declared: lit; free: a string frame above)
	oColon                // after the key
	oColonSp              // after ':' (one space may come)
	oValue                // after ': '
	oAfter                // after a value
	oComma                // after ',' (one space may come)
	oCommaSp              // after ', '
)

// Array phases.
const (
	aOpen uint8 = iota
	aAfter
	aComma
	aCommaSp
)

// String phases.
const (
	sIn uint8 = iota
	sEsc
	sHex
	sUTF8
)

// Number phases.
const (
	nMinus uint8 = iota
	nZero
	nInt
	nDot
	nFrac
	nExp
	nExpSign
	nExpDigits
)

// Digits a number may have in each of its parts: a model cannot write digits for ever.
const maxDigits = 16

type frame struct {
	k     fkind
	phase uint8
	lo    byte // string: range of the next UTF-8 byte
	hi    byte
	cnt   int32 // string: hex digits or UTF-8 bytes left; number: digits of the part
	n     *node
	lit   *lit   // literal, declared key: position in the trie
	set   uint64 // object: properties written
	prop  int32  // object: the property whose value comes
}

type stack struct {
	f      frame
	parent *stack
}

// State is the automaton's state: the zero State is invalid; start from Schema.Start.
type State struct {
	top    frame
	parent *stack
}

// Start is the state before any text.
func (s *Schema) Start() State { return State{top: frame{k: fStart, n: s.root}} }

// Done reports whether the value is complete and nothing more may follow.
func (st State) Done() bool { return st.top.k == fDone }

// Complete reports whether the text so far is a whole value (the generation may end here).
func (st State) Complete() bool {
	if st.top.k == fDone {
		return true
	}
	if st.parent != nil {
		return false
	}
	return st.top.ends()
}

// ends reports whether a number or literal frame may end here.
func (f *frame) ends() bool {
	switch f.k {
	case fNumber:
		return f.phase == nZero || f.phase == nInt || f.phase == nFrac || f.phase == nExpDigits
	case fLiteral:
		return f.lit.end
	}
	return false
}

// Match reports whether text is a whole value of the schema, as the automaton reads it.
func (s *Schema) Match(text string) bool {
	st := s.Start()
	for i := 0; i < len(text); i++ {
		var ok bool
		if st, ok = st.Step(text[i]); !ok {
			return false
		}
	}
	return st.Complete()
}

// StepString steps the bytes of text, reporting false at the first one refused.
func (st State) StepString(text []byte) (State, bool) {
	for _, c := range text {
		var ok bool
		if st, ok = st.Step(c); !ok {
			return st, false
		}
	}
	return st, true
}

// Step reads one byte: the next state, or false when the byte cannot come here.
func (st State) Step(c byte) (State, bool) {
	f := &st.top
	switch f.k {
	case fStart:
		nf, ok := open(f.n, c)
		if !ok {
			return st, false
		}
		st.top = nf
		return st.settle(), true
	case fDone:
		return st, false
	case fString:
		return st.stepString(c)
	case fNumber:
		if f.stepNumber(c) {
			return st, true
		}
		if !f.ends() || st.parent == nil {
			return st, false
		}
		return st.pop().Step(c)
	case fLiteral:
		if next := f.lit.child(c); next != nil {
			f.lit = next
			return st.settle(), true
		}
		if !f.lit.end || st.parent == nil {
			return st, false
		}
		return st.pop().Step(c)
	case fObject:
		return st.stepObject(c)
	case fArray:
		return st.stepArray(c)
	case fCall:
		switch f.phase {
		case cName:
			next := f.lit.child(c)
			if next == nil {
				return st, false
			}
			f.lit = next
			if next.end {
				f.phase, f.prop = cArgs, int32(next.index)
			}
			return st, true
		case cArgs:
			return st.push(f.n.alts[f.prop], c)
		case cClose:
			if c == '}' {
				return st.pop(), true
			}
		}
	}
	return st, false
}

// settle pops a literal that is complete and cannot go on.
func (st State) settle() State {
	if st.top.k == fLiteral && st.top.lit.end && len(st.top.lit.edges) == 0 {
		return st.pop()
	}
	return st
}

// pop ends the innermost value: its parent takes the next step.
func (st State) pop() State {
	if st.parent == nil {
		return State{top: frame{k: fDone}}
	}
	p := st.parent
	st.top, st.parent = p.f, p.parent
	switch f := &st.top; f.k {
	case fObject:
		if f.phase == oKey { // a free key
			f.phase = oColon
		} else {
			f.phase = oAfter
		}
	case fArray:
		f.phase = aAfter
		f.cnt++
	case fCall:
		f.phase = cClose
	}
	return st
}

// push opens a value of n with its first byte c inside the current frame.
func (st State) push(n *node, c byte) (State, bool) {
	nf, ok := open(n, c)
	if !ok {
		return st, false
	}
	st.parent = &stack{f: st.top, parent: st.parent}
	st.top = nf
	return st.settle(), true
}

// open is the frame of a value of n whose first byte is c.
func open(n *node, c byte) (frame, bool) {
	if !n.first[c] {
		return frame{}, false
	}
	switch n.kind {
	case kAny:
		switch {
		case c == '{':
			return frame{k: fObject, n: freeObject}, true
		case c == '[':
			return frame{k: fArray, n: freeArray}, true
		case c == '"':
			return frame{k: fString, n: anyString}, true
		case c == 't' || c == 'f' || c == 'n':
			return open(anyLits, c)
		}
		return open(anyNumber, c)
	case kObject:
		return frame{k: fObject, n: n}, true
	case kArray:
		return frame{k: fArray, n: n}, true
	case kString:
		return frame{k: fString, n: n}, true
	case kNumber, kInteger:
		f := frame{k: fNumber, n: n}
		switch {
		case c == '-':
			f.phase = nMinus
		case c == '0':
			f.phase = nZero
		default:
			f.phase, f.cnt = nInt, 1
		}
		return f, true
	case kLiteral:
		return frame{k: fLiteral, n: n, lit: n.lits.child(c)}, true
	case kCall:
		return frame{k: fCall, n: n, lit: n.lits.child(c)}, true
	case kUnion:
		for _, a := range n.alts {
			if a.first[c] {
				return open(a, c)
			}
		}
	}
	return frame{}, false
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// stepNumber reads a byte of a number, reporting false when it does not continue it.
func (f *frame) stepNumber(c byte) bool {
	integer := f.n.kind == kInteger
	switch f.phase {
	case nMinus:
		switch {
		case c == '0':
			f.phase = nZero
		case isDigit(c):
			f.phase, f.cnt = nInt, 1
		default:
			return false
		}
	case nZero, nInt:
		switch {
		case f.phase == nInt && isDigit(c) && f.cnt < maxDigits:
			f.cnt++
		case c == '.' && !integer:
			f.phase = nDot
		case (c == 'e' || c == 'E') && !integer:
			f.phase = nExp
		default:
			return false
		}
	case nDot:
		if !isDigit(c) {
			return false
		}
		f.phase, f.cnt = nFrac, 1
	case nFrac:
		switch {
		case isDigit(c) && f.cnt < maxDigits:
			f.cnt++
		case c == 'e' || c == 'E':
			f.phase = nExp
		default:
			return false
		}
	case nExp:
		switch {
		case c == '+' || c == '-':
			f.phase = nExpSign
		case isDigit(c):
			f.phase, f.cnt = nExpDigits, 1
		default:
			return false
		}
	case nExpSign:
		if !isDigit(c) {
			return false
		}
		f.phase, f.cnt = nExpDigits, 1
	case nExpDigits:
		if !isDigit(c) || f.cnt >= 2 { // e99 at most: every number fits a float64
			return false
		}
		f.cnt++
	}
	return true
}

func isHex(c byte) bool { return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func (st State) stepString(c byte) (State, bool) {
	f := &st.top
	switch f.phase {
	case sIn:
		switch {
		case c == '"':
			return st.pop(), true
		case c == '\\':
			f.phase = sEsc
		case c < 0x20:
			return st, false
		case c < 0x80:
		default:
			lo, hi, n := utf8x.SecondByte(c)
			if n == 0 {
				return st, false
			}
			f.phase, f.lo, f.hi, f.cnt = sUTF8, lo, hi, int32(n-1)
		}
	case sEsc:
		switch c {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			f.phase = sIn
		case 'u':
			f.phase, f.cnt = sHex, 4
		default:
			return st, false
		}
	case sHex:
		if !isHex(c) {
			return st, false
		}
		if f.cnt--; f.cnt == 0 {
			f.phase = sIn
		}
	case sUTF8:
		if c < f.lo || c > f.hi {
			return st, false
		}
		f.lo, f.hi = 0x80, 0xBF
		if f.cnt--; f.cnt == 0 {
			f.phase = sIn
		}
	}
	return st, true
}

// remaining reports whether an object may take another key.
func (f *frame) remaining() bool {
	return f.n.free || f.n.keys != nil && f.n.keys.mask&^f.set != 0
}

// closable reports whether an object may close.
func (f *frame) closable() bool { return f.n.required&^f.set == 0 }

func (st State) stepObject(c byte) (State, bool) {
	f := &st.top
	switch f.phase {
	case oOpen, oComma, oCommaSp:
		switch {
		case c == '}' && f.phase == oOpen && f.closable():
			return st.pop(), true
		case c == ' ' && f.phase == oComma:
			f.phase = oCommaSp
			return st, true
		case c == '"' && f.remaining():
			f.phase = oKey
			if f.n.free {
				st.parent = &stack{f: st.top, parent: st.parent}
				st.top = frame{k: fString, n: anyString}
				return st, true
			}
			f.lit = f.n.keys.child('"')
			return st, true
		}
	case oKey: // a declared key
		next := f.lit.child(c)
		if next == nil || next.mask&^f.set == 0 {
			return st, false
		}
		f.lit = next
		if next.end {
			f.prop = int32(next.index)
			f.set |= 1 << uint(next.index)
			f.phase, f.lit = oColon, nil
		}
		return st, true
	case oColon:
		if c == ':' {
			f.phase = oColonSp
			return st, true
		}
	case oColonSp, oValue:
		if c == ' ' && f.phase == oColonSp {
			f.phase = oValue
			return st, true
		}
		n := anyNode
		if !f.n.free {
			n = f.n.props[f.prop]
		}
		return st.push(n, c)
	case oAfter:
		switch {
		case c == ',' && f.remaining():
			f.phase = oComma
			return st, true
		case c == '}' && f.closable():
			return st.pop(), true
		}
	}
	return st, false
}

func (st State) stepArray(c byte) (State, bool) {
	f := &st.top
	switch f.phase {
	case aOpen, aComma, aCommaSp:
		switch {
		case c == ']' && f.phase == aOpen:
			return st.pop(), true
		case c == ' ' && f.phase == aComma:
			f.phase = aCommaSp
			return st, true
		}
		return st.push(f.n.items, c)
	case aAfter:
		switch c {
		case ',':
			f.phase = aComma
			return st, true
		case ']':
			return st.pop(), true
		}
	}
	return st, false
}

// Prefix reports whether text can begin a value of the schema.
func (s *Schema) Prefix(text string) bool {
	_, ok := s.Start().StepString([]byte(text))
	return ok
}
