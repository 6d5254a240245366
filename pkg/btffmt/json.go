package btffmt

import "unicode/utf8"

// AppendJSONString appends s to dst as a JSON string literal and returns
// the extended buffer. It allocates only when dst must grow.
//
// The output is byte for byte what encoding/json writes for string(s) with
// HTML escaping turned off (json.Encoder.SetEscapeHTML(false)): '"' and '\\'
// are backslash-escaped; control characters below U+0020 become \b, \f, \n,
// \r, \t or \u00XX; U+2028 and U+2029 become \u2028 and \u2029; each byte
// that is not part of valid UTF-8 becomes \ufffd; everything else, valid
// multi-byte UTF-8 included, is copied as is. Unlike json.Marshal's default,
// '<', '>' and '&' are not escaped: the result is valid JSON, but is not
// safe to embed in HTML <script> elements as is.
func AppendJSONString(dst []byte, s []byte) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if jsonSafe[c] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '\\', '"':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// jsonSafe reports the ASCII bytes that appear in a JSON string unescaped:
// all but the control characters, '"' and '\\'.
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for c := ' '; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()
