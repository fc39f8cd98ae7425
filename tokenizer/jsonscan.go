package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// A tokenizer.json is mostly its vocabulary and merges (11 MB for Qwen's 151k tokens); encoding/json takes over a
// second on them, so this small scanner reads the object structure and those two fields, and leaves only the small
// components to encoding/json.

type jsonScanner struct {
	data []byte
	pos  int
}

func (s *jsonScanner) errorf(format string, args ...any) error {
	return fmt.Errorf("JSON at byte %d: %s", s.pos, fmt.Sprintf(format, args...))
}

func (s *jsonScanner) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte (0 at the end).
func (s *jsonScanner) peek() byte {
	s.ws()
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

func (s *jsonScanner) expect(c byte) error {
	if s.peek() != c {
		if s.pos >= len(s.data) {
			return s.errorf("want %q, got the end", c)
		}
		return s.errorf("want %q, got %q", c, s.data[s.pos])
	}
	s.pos++
	return nil
}

// str reads a string. Without escapes it returns a slice of the input; otherwise it decodes into buf, which must
// not share memory with the input.
func (s *jsonScanner) str(buf []byte) ([]byte, error) {
	if err := s.expect('"'); err != nil {
		return nil, err
	}
	start := s.pos
	end := bytes.IndexByte(s.data[start:], '"')
	if end < 0 {
		return nil, s.errorf("unterminated string")
	}
	if bytes.IndexByte(s.data[start:start+end], '\\') < 0 {
		s.pos = start + end + 1
		return s.data[start : start+end], nil
	}
	return s.strEscaped(append(buf[:0], s.data[start:start+bytes.IndexByte(s.data[start:], '\\')]...))
}

// strEscaped decodes the rest of a string from the first backslash, appending to buf.
func (s *jsonScanner) strEscaped(buf []byte) ([]byte, error) {
	s.pos += bytes.IndexByte(s.data[s.pos:], '\\')
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			s.pos++
			if !utf8.Valid(buf) {
				return nil, s.errorf("string is not valid UTF-8")
			}
			return buf, nil
		case c != '\\':
			buf = append(buf, c)
			s.pos++
			continue
		}
		if s.pos+1 >= len(s.data) {
			break
		}
		e := s.data[s.pos+1]
		s.pos += 2
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, err := s.hex4()
			if err != nil {
				return nil, err
			}
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if s.pos+1 < len(s.data) && s.data[s.pos] == '\\' && s.data[s.pos+1] == 'u' {
					s.pos += 2
					if r2, err = s.hex4(); err != nil {
						return nil, err
					}
				}
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError && r2 >= 0 && !utf16.IsSurrogate(r2) {
					buf = utf8.AppendRune(buf, utf8.RuneError)
					r = r2 // a lone surrogate followed by a plain escape
				}
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return nil, s.errorf("bad escape \\%c", e)
		}
	}
	return nil, s.errorf("unterminated string")
}

func (s *jsonScanner) hex4() (rune, error) {
	if s.pos+4 > len(s.data) {
		return 0, s.errorf("short \\u escape")
	}
	v, err := strconv.ParseUint(string(s.data[s.pos:s.pos+4]), 16, 16)
	if err != nil {
		return 0, s.errorf("bad \\u escape")
	}
	s.pos += 4
	return rune(v), nil
}

// int reads a non-negative integer.
func (s *jsonScanner) int() (int, error) {
	s.ws()
	start := s.pos
	n := 0
	for s.pos < len(s.data) && s.data[s.pos] >= '0' && s.data[s.pos] <= '9' {
		if n > 1<<40 {
			return 0, s.errorf("number too large")
		}
		n = n*10 + int(s.data[s.pos]-'0')
		s.pos++
	}
	if s.pos == start {
		return 0, s.errorf("want a non-negative integer")
	}
	if s.pos < len(s.data) && (s.data[s.pos] == '.' || s.data[s.pos] == 'e' || s.data[s.pos] == 'E') {
		return 0, s.errorf("want an integer")
	}
	return n, nil
}

// skip passes over one value and returns its bytes. It checks little: values that are used are decoded later.
func (s *jsonScanner) skip() ([]byte, error) {
	s.ws()
	start := s.pos
	if s.pos >= len(s.data) {
		return nil, s.errorf("want a value, got the end")
	}
	switch s.data[s.pos] {
	case '"':
		_, err := s.str(nil)
		return s.data[start:s.pos], err
	case '{', '[':
		depth := 0
		for s.pos < len(s.data) {
			switch s.data[s.pos] {
			case '"':
				if _, err := s.str(nil); err != nil {
					return nil, err
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			s.pos++
			if depth == 0 {
				return s.data[start:s.pos], nil
			}
		}
		return nil, s.errorf("unterminated value")
	}
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			if s.pos == start {
				return nil, s.errorf("want a value")
			}
			return s.data[start:s.pos], nil
		}
		s.pos++
	}
	if s.pos == start {
		return nil, s.errorf("want a value")
	}
	return s.data[start:s.pos], nil
}

// object calls field for each key of an object; field must consume the value.
func (s *jsonScanner) object(field func(key []byte) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.pos++
		return nil
	}
	for {
		key, err := s.str(nil)
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := field(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		default:
			return s.errorf("want ',' or '}' in object")
		}
	}
}

// array calls item for each element of an array; item must consume the element.
func (s *jsonScanner) array(item func(i int) error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.peek() == ']' {
		s.pos++
		return nil
	}
	for i := 0; ; i++ {
		if err := item(i); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return nil
		default:
			return s.errorf("want ',' or ']' in array")
		}
	}
}

// rawFields splits an object into its fields' raw values. A field named in parse is handed to its function
// instead, which must consume the value (so a large field is read once, not skipped first).
func rawFields(data []byte, parse map[string]func(*jsonScanner) error) (map[string]json.RawMessage, error) {
	s := &jsonScanner{data: data}
	fields := map[string]json.RawMessage{}
	err := s.object(func(key []byte) error {
		if f, ok := parse[string(key)]; ok {
			fields[string(key)] = nil
			return f(s)
		}
		v, err := s.skip()
		fields[string(key)] = v
		return err
	})
	if err != nil {
		return nil, err
	}
	if s.peek() != 0 {
		return nil, s.errorf("data after the top-level object")
	}
	return fields, nil
}
