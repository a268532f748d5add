package extender

import "strings"

// quickArgs is what scanArgs reads of a filter or prioritize call: the
// pod's identity and the node names.
type quickArgs struct {
	name, namespace, uid, resourceVersion string
	names                                 []string
}

// maxDepth is encoding/json's limit on nesting; deeper bodies go to it,
// which refuses them.
const maxDepth = 10000

// scanArgs reads the pod's identity and the node names from an
// ExtenderArgs body as kube-scheduler writes it (keys as its Go fields
// are named; nodeCacheCapable: the names, Nodes null), checking that the
// whole body is JSON as encoding/json would. It reports false for
// anything else: another shape, a key of ours in another case or given
// twice, a value of ours with escapes or bytes outside printable ASCII,
// JSON that is not valid; decodeCall then decodes the body with
// encoding/json, which says what is wrong. The names are substrings of
// one copy of the body: a call names hundreds of nodes, and decoding
// them one string each, on top of scanning the body twice, cost more
// than the rest of the call's decoding.
func scanArgs(body []byte) (quickArgs, bool) {
	s := scanner{data: string(body)}
	var a quickArgs
	var seenPod, seenNodes, seenNames bool
	ok := s.object(0, func(key string) bool {
		switch key {
		case "Pod":
			if seenPod {
				return false
			}
			seenPod = true
			return s.pod(&a)
		case "Nodes":
			if seenNodes {
				return false
			}
			seenNodes = true
			return s.literal("null")
		case "NodeNames":
			if seenNames {
				return false
			}
			seenNames = true
			return s.names(&a.names)
		}
		return !foldsTo(key, "pod", "nodes", "nodenames") && s.value(1)
	})
	if !ok || !seenPod || !seenNames {
		return quickArgs{}, false
	}
	s.space()
	return a, s.i == len(s.data)
}

// foldsTo reports whether key matches one of names ignoring case, as
// encoding/json matches keys to fields.
func foldsTo(key string, names ...string) bool {
	for _, n := range names {
		if strings.EqualFold(key, n) {
			return true
		}
	}
	return false
}

// scanner reads JSON from data, from i on.
type scanner struct {
	data string
	i    int
}

func (s *scanner) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next skips space and returns the next byte, 0 at the end.
func (s *scanner) next() byte {
	s.space()
	if s.i == len(s.data) {
		return 0
	}
	return s.data[s.i]
}

// object reads an object, calling member with each key; member reads the
// value and reports whether it was well formed.
func (s *scanner) object(depth int, member func(key string) bool) bool {
	if depth >= maxDepth || s.next() != '{' {
		return false
	}
	s.i++
	if s.next() == '}' {
		s.i++
		return true
	}
	for {
		if s.next() != '"' {
			return false
		}
		key, ok := s.str()
		// A key with escapes or beyond ASCII might match one of ours
		// once decoded, as encoding/json matches them.
		if !ok || !printable(key) || s.next() != ':' {
			return false
		}
		s.i++
		if !member(key) {
			return false
		}
		switch s.next() {
		case ',':
			s.i++
		case '}':
			s.i++
			return true
		default:
			return false
		}
	}
}

// pod reads the pod: the four fields of its metadata, skipping the rest.
func (s *scanner) pod(a *quickArgs) bool {
	var seen bool
	return s.object(1, func(key string) bool {
		if key != "metadata" {
			return !foldsTo(key, "metadata") && s.value(2)
		}
		if seen {
			return false
		}
		seen = true
		var read [4]bool
		return s.object(2, func(key string) bool {
			var to *string
			var field int
			switch key {
			case "name":
				to, field = &a.name, 0
			case "namespace":
				to, field = &a.namespace, 1
			case "uid":
				to, field = &a.uid, 2
			case "resourceVersion":
				to, field = &a.resourceVersion, 3
			default:
				return !foldsTo(key, "name", "namespace", "uid", "resourceVersion") && s.value(3)
			}
			if read[field] {
				return false
			}
			read[field] = true
			v, ok := s.plain()
			*to = v
			return ok
		})
	})
}

// names reads an array of plain strings.
func (s *scanner) names(out *[]string) bool {
	if s.next() != '[' {
		return false
	}
	// A comma per name after the first, unless names hold commas or ']'.
	n := len(s.data) - s.i
	if end := strings.IndexByte(s.data[s.i:], ']'); end >= 0 {
		n = end
	}
	names := make([]string, 0, strings.Count(s.data[s.i:s.i+n], ",")+1)
	ok := s.array(1, func() bool {
		name, ok := s.plain()
		names = append(names, name)
		return ok
	})
	*out = names
	return ok
}

// array reads an array, calling elem for each element; elem reads it
// and reports whether it was well formed.
func (s *scanner) array(depth int, elem func() bool) bool {
	if depth >= maxDepth || s.next() != '[' {
		return false
	}
	s.i++
	if s.next() == ']' {
		s.i++
		return true
	}
	for {
		if !elem() {
			return false
		}
		switch s.next() {
		case ',':
			s.i++
		case ']':
			s.i++
			return true
		default:
			return false
		}
	}
}

// plain reads a string of printable ASCII without escapes, the only
// strings that read the same here as through encoding/json.
func (s *scanner) plain() (string, bool) {
	if s.next() != '"' {
		return "", false
	}
	end := strings.IndexByte(s.data[s.i+1:], '"')
	if end < 0 {
		return "", false
	}
	v := s.data[s.i+1 : s.i+1+end]
	if !printable(v) {
		return "", false
	}
	s.i += end + 2
	return v, true
}

// printable reports whether v is printable ASCII without escapes.
func printable(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == '\\' || c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}

// str reads a string and returns it with its escapes as written; a key
// with escapes matches none of ours.
func (s *scanner) str() (string, bool) {
	start := s.i + 1
	for j := start; j < len(s.data); j++ {
		switch c := s.data[j]; {
		case c == '"':
			s.i = j + 1
			return s.data[start:j], true
		case c < 0x20:
			return "", false
		case c == '\\':
			j++
			if j == len(s.data) {
				return "", false
			}
			switch s.data[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(s.data) {
					return "", false
				}
				for _, h := range []byte(s.data[j+1 : j+5]) {
					if !isHex(h) {
						return "", false
					}
				}
				j += 4
			default:
				return "", false
			}
		}
	}
	return "", false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// value skips any JSON value, checking it is well formed.
func (s *scanner) value(depth int) bool {
	switch c := s.next(); {
	case c == '{':
		return s.object(depth, func(string) bool { return s.value(depth + 1) })
	case c == '[':
		return s.array(depth, func() bool { return s.value(depth + 1) })
	case c == '"':
		_, ok := s.str()
		return ok
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	}
	return false
}

func (s *scanner) literal(word string) bool {
	s.space()
	if !strings.HasPrefix(s.data[s.i:], word) {
		return false
	}
	s.i += len(word)
	return true
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (s *scanner) number() bool {
	d := s.data
	i := s.i
	if i < len(d) && d[i] == '-' {
		i++
	}
	digits := func() int {
		start := i
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
		return i - start
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(d) && d[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	s.i = i
	return true
}
