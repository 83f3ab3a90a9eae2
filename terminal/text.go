package terminal

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"math/bits"
	"strconv"
	"unicode/utf8"
)

// Output goes to the page as text where it is UTF-8: `cat` of source code
// then costs neither base64's third more bytes on the wire nor decoding
// them in the page. A run of valid UTF-8 goes as a text event (a JSON
// string, so that a carriage return cannot end the SSE line), everything
// else as an out event (base64). A run goes as text only where that is
// no longer on the wire than base64: output made mostly of escape
// sequences (ESC is six bytes in JSON) and the short runs of ASCII inside
// binary output stay out.

// splitCost is what a text run among bytes that go as out adds besides
// its own JSON: the head of its event and of the out event that follows
// it, at the offsets of a long-lived terminal.
const splitCost = 2 * len("event: text\nid: 12345678\ndata: \n\n")

// jsonCost is how many bytes an ASCII byte takes in a JSON string
// (appendJSONString); bytes of longer characters take one each.
var jsonCost = func() (c [utf8.RuneSelf]uint8) {
	for b := range c {
		switch {
		case b == '"' || b == '\\' || b == '\b' || b == '\f' || b == '\n' || b == '\r' || b == '\t':
			c[b] = 2
		case b < 0x20:
			c[b] = 6 // \u00XX
		default:
			c[b] = 1
		}
	}
	return c
}()

// appendOutput appends to b the events that carry p, whose first byte is
// at offset off: text events for runs of valid UTF-8 worth it, out events
// for the rest, each with the offset after its bytes as id. It returns
// how many bytes of p they carry: all of p, unless hold is set and p ends
// inside a character, whose first bytes are then left for the call that
// has the rest. So no event splits a character that arrives whole.
//
// It looks at each byte once to find the runs and their JSON size, and
// once more to write the event: this is every byte a shell prints.
func appendOutput(b []byte, off uint64, p []byte, hold bool) ([]byte, int) {
	out := 0  // p[out:run] goes as one out event
	run := 0  // p[run:i] is valid UTF-8 ...
	cost := 0 // ... of this many bytes as JSON string content
	i := 0
	words := 0 // where to look at eight bytes at once again
	bad := 0   // bytes that start no character
	for i < len(p) {
		if i >= words && i+8 <= len(p) {
			// Plain ASCII costs a byte each: skip it eight bytes at a
			// time, up to the first byte that is not; from there, the
			// next few bytes are looked at one by one.
			w := binary.LittleEndian.Uint64(p[i:])
			k := bits.TrailingZeros64(w&hiBits|escapes(w)) / 8
			cost += k
			i += k
			if k == 8 {
				continue
			}
			words = i + 8
		}
		c := p[i]
		if c < utf8.RuneSelf {
			cost += int(jsonCost[c])
			i++
			continue
		}
		if c >= 0xc2 && c < 0xf5 {
			if size := runeLen(p[i:]); size > 0 {
				cost += size
				i += size
				continue
			}
		}
		// p[i] starts no character, or one that p cuts short.
		if hold && !utf8.FullRune(p[i:]) {
			break
		}
		if i > run && cost+2+splitCost <= base64Len(i-run) {
			b, out = appendRun(b, off, p, out, run, i, cost, false)
		}
		i++
		run, cost = i, 0
		if bad++; bad >= binaryBad && bad*256 > i {
			// Binary output: its runs of text are too short to go as
			// text, and looking for them costs more than base64.
			i = len(p)
			if hold {
				i -= cutShort(p[run:])
			}
			run = i
		}
	}
	if i > run {
		b, out = appendRun(b, off, p, out, run, i, cost, out == run)
	}
	if out < i {
		b = appendOut(b, off+uint64(i), p[out:i])
	}
	return b, i
}

// appendRun ends the valid UTF-8 p[run:end], whose JSON string content is
// cost bytes long: as a text event if that is no longer than its base64
// (with the heads of the events it adds when it is not alone, between
// bytes that go as out), else as part of the out event p[out:run] starts.
// It returns where the bytes that go as out start now.
func appendRun(b []byte, off uint64, p []byte, out, run, end, cost int, alone bool) ([]byte, int) {
	size := cost + 2
	if !alone {
		size += splitCost
	}
	if size > base64Len(end-run) {
		return b, out
	}
	if out < run {
		b = appendOut(b, off+uint64(run), p[out:run])
	}
	return appendText(b, off+uint64(end), p[run:end]), end
}

// binaryBad is how many bytes that start no character a read may have
// before it can be taken for binary output: from there, once they are
// more than one in 256, the rest of it goes as out unread. Among them,
// runs of text are mostly too short to go as text anyway.
const binaryBad = 16

// cutShort is how many bytes at p's end are the first bytes of a character
// cut short.
func cutShort(p []byte) int {
	for k := 1; k <= min(len(p), utf8.UTFMax-1); k++ {
		c := p[len(p)-k]
		if c&0xc0 == 0x80 {
			continue // a continuation byte: its lead is further back
		}
		if !utf8.FullRune(p[len(p)-k:]) {
			return k
		}
		return 0
	}
	return 0
}

// Words of eight bytes tested at once, for the plain ASCII most output is.
const (
	loBits = 0x0101010101010101
	hiBits = 0x8080808080808080
)

// escapes marks, with its top bit, the first of the eight bytes of w
// (little-endian) that a JSON string escapes: a control character, a
// quote or a backslash. The bytes after it may be marked wrongly; before
// it none is marked, and with none to escape none is.
func escapes(w uint64) uint64 {
	q := w ^ (loBits * '"')
	bs := w ^ (loBits * '\\')
	return ((w-loBits*0x20)&^w | (q-loBits)&^q | (bs-loBits)&^bs) & hiBits
}

// runeLen is the length of the character of two to four bytes that p
// starts with, or 0 if p starts none (as utf8.DecodeRune would say by
// RuneError of size 1, but without working out the character).
func runeLen(p []byte) int {
	c := p[0]
	switch {
	case c < 0xc2: // ASCII, a continuation byte, or an overlong lead
		return 0
	case c < 0xe0:
		if len(p) > 1 && p[1]&0xc0 == 0x80 {
			return 2
		}
	case c < 0xf0:
		lo, hi := byte(0x80), byte(0xbf)
		if c == 0xe0 {
			lo = 0xa0 // not overlong
		} else if c == 0xed {
			hi = 0x9f // not a surrogate
		}
		if len(p) > 2 && lo <= p[1] && p[1] <= hi && p[2]&0xc0 == 0x80 {
			return 3
		}
	case c < 0xf5:
		lo, hi := byte(0x80), byte(0xbf)
		if c == 0xf0 {
			lo = 0x90 // not overlong
		} else if c == 0xf4 {
			hi = 0x8f // not past U+10FFFF
		}
		if len(p) > 3 && lo <= p[1] && p[1] <= hi && p[2]&0xc0 == 0x80 && p[3]&0xc0 == 0x80 {
			return 4
		}
	}
	return 0
}

func base64Len(n int) int { return (n + 2) / 3 * 4 }

// appendOut appends an out event of raw, whose last byte ends before id.
func appendOut(b []byte, id uint64, raw []byte) []byte {
	b = appendHead(b, "out", id)
	b = base64.StdEncoding.AppendEncode(b, raw)
	return append(b, "\n\n"...)
}

// appendText appends a text event of the valid UTF-8 text, whose last
// byte ends before id.
func appendText(b []byte, id uint64, text []byte) []byte {
	b = appendHead(b, "text", id)
	b = appendJSONString(b, text)
	return append(b, "\n\n"...)
}

// appendHead starts an event, up to its data.
func appendHead(b []byte, name string, id uint64) []byte {
	b = append(b, "event: "...)
	b = append(b, name...)
	b = append(b, "\nid: "...)
	b = strconv.AppendUint(b, id, 10)
	return append(b, "\ndata: "...)
}

// appendJSONString appends the valid UTF-8 text as a JSON string, escaped
// as encoding/json escapes control characters, quotes and backslashes (it
// leaves <, >, & and U+2028/9 alone: the string is read by JSON.parse,
// not put in HTML or a script). The string is jsonCost's bytes long,
// plus its quotes.
func appendJSONString(b, text []byte) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(text); {
		if i+8 <= len(text) {
			k := bits.TrailingZeros64(escapes(binary.LittleEndian.Uint64(text[i:]))) / 8
			if i += k; k == 8 {
				continue
			}
		}
		c := text[i]
		i++
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, text[start:i-1]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i
	}
	b = append(b, text[start:]...)
	return append(b, '"')
}

// AppendText appends the text a text event's data carries, a JSON
// string, to dst: a lean client's decoder, which copies the runs between
// escapes whole (encoding/json's Unmarshal checks and copies the string
// more than once).
func AppendText(dst, data []byte) ([]byte, error) {
	if len(data) < 2 || data[0] != '"' || data[len(data)-1] != '"' {
		return dst, errors.New("text data is not a JSON string")
	}
	q := data[1 : len(data)-1]
	for {
		i := bytes.IndexByte(q, '\\')
		if i < 0 {
			return append(dst, q...), nil
		}
		dst = append(dst, q[:i]...)
		if i+1 == len(q) {
			return dst, errors.New("text data ends in a backslash")
		}
		c := q[i+1]
		q = q[i+2:]
		switch c {
		case '"', '\\', '/':
			dst = append(dst, c)
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			// The server writes \u only for control characters; any other
			// character, surrogate halves too, would come as itself.
			if len(q) < 4 {
				return dst, errors.New("text data: short \\u escape")
			}
			r, err := strconv.ParseUint(string(q[:4]), 16, 16)
			if err != nil || r >= 0xd800 && r < 0xe000 {
				return dst, errors.New("text data: bad \\u escape")
			}
			dst = utf8.AppendRune(dst, rune(r))
			q = q[4:]
		default:
			return dst, errors.New("text data: unknown escape")
		}
	}
}
