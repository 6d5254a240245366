// Package btffmt renders raw map keys, values and ring-buffer records as
// text, using the BTF type the BPF object declared for them, so that
// `gpubpf run` can print any program's data the way the program's author
// wrote the struct: {ts=1712 block_x=3 name="vec"}.
//
// For a stream of records of one type, compile the type once and append
// each record into a reused buffer:
//
//	f := btffmt.Compile(t)
//	for rec := range records {
//		buf = f.Append(buf[:0], rec)
//		...
//	}
//
// Format(t, b) is the one-off form of the same thing and returns exactly
// string(Compile(t).Append(nil, b)).
package btffmt

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"math/bits"
	"slices"
	"strconv"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf/btf"
)

// Format renders b as a value of type t. With no type (t == nil), or when b
// is shorter than the type, integers of 1, 2, 4 and 8 bytes print as
// unsigned decimals and anything else as hex, so nothing is ever hidden.
//
// Format compiles t on every call (into reused scratch space); to format
// many values of one type, use Compile once and Formatter.Append per value.
func Format(t btf.Type, b []byte) string {
	c := scratch.Get().(*compiler)
	f := c.compile(t, false)
	c.out = f.Append(c.out[:0], b)
	s := string(c.out)
	c.release()
	return s
}

// A Formatter renders values of one BTF type. It is built by Compile, which
// walks the type once into a flat list of steps (literal text, offset,
// kind), so that Append does no type switches, no reflection and no
// allocation beyond growing dst. A Formatter is immutable and safe for
// concurrent use.
type Formatter struct {
	raw   bool // no usable type: every value prints raw
	size  int  // btf.Sizeof of the type; shorter values print raw
	steps []step
	text  []byte // the steps' literal text
	enums []enumNames
}

// Compile prepares a Formatter for values of type t (which may be nil).
// Append on the result produces exactly what Format(t, b) returns. The
// Formatter reflects t as it is now: recompile after changing t.
func Compile(t btf.Type) *Formatter {
	var c compiler
	f := c.compile(t, true)
	return &f
}

// Append appends the text of the value b to dst and returns the extended
// buffer: the same text Format(t, b) returns for the type t f was compiled
// from. It allocates only when dst must grow. A nil *Formatter formats
// like Compile(nil).
func (f *Formatter) Append(dst, b []byte) []byte {
	if f == nil || f.raw || len(b) < f.size {
		return appendRaw(dst, b)
	}
	// The top-level struct's '{', if any, is at len(dst); see opSep.
	return f.run(dst, b, f.steps, 0, len(dst)+1)
}

// appendRaw is the typeless rendering: integers of 1, 2, 4 and 8 bytes as
// unsigned decimals, anything else as hex.
func appendRaw(dst, b []byte) []byte {
	switch len(b) {
	case 1:
		return strconv.AppendUint(dst, uint64(b[0]), 10)
	case 2:
		return strconv.AppendUint(dst, uint64(binary.LittleEndian.Uint16(b)), 10)
	case 4:
		return strconv.AppendUint(dst, uint64(binary.LittleEndian.Uint32(b)), 10)
	case 8:
		return strconv.AppendUint(dst, binary.LittleEndian.Uint64(b), 10)
	default:
		return hex.AppendEncode(dst, b)
	}
}

// maxDepth bounds how deeply nested structs, unions and arrays are
// expanded; deeper values print as "…".
const maxDepth = 8

type op uint8

const (
	opLit     op = iota // only the literal
	opU8                // unsigned little-endian integers of 1, 2, 4, 8 bytes
	opU16               //
	opU32               //
	opU64               //
	opS8                // signed ones
	opS16               //
	opS32               //
	opS64               //
	opUint              // unsigned integer of any size (readUint)
	opInt               // signed integer of any size: int64(n<<shift)>>shift
	opBool              // "true" if readUint != 0
	opEnum              // enumerator name, or the unsigned value
	opPtr               // hex of a u64 (the literal carries the "0x")
	opChars             // char array: quoted up to the first NUL
	opHex               // hex of size bytes
	opRawRest           // appendRaw of b[off:] (top level only)
	opBits              // bitfield: (readUint >> shift) & mask
	opLoop              // array: the next skip steps, n times, stride size apart
	opIf                // top level: skip the next skip steps if len(b) < n
	opSep               // top level: ' ' if a member was already printed
)

// A step appends its literal text, then the value of its kind read from b
// at off (relative to the enclosing array element).
type step struct {
	op    op
	shift uint32 // opInt, opBits
	// The literal is text[lo:hi]; its first 16 bytes, zero-padded, are
	// also in lit0 and lit1, so short literals are two stores.
	lit0, lit1 uint64
	lo, hi     int
	room       int // spare capacity of dst the step needs: see run
	off        int
	size       int    // bytes read; opLoop: element stride
	n          int    // opChars, opLoop: element count; opIf: bytes needed; opEnum: index in enums
	skip       int    // opLoop: body length; opIf: member length, in steps
	mask       uint64 // opBits
}

// numRoom is the room, past the literal, that the numeric steps write into
// without checking: "-9223372036854775808" is 20 bytes.
const numRoom = 24

type enumNames struct {
	values []btf.EnumValue   // in declaration order: the first match wins
	byVal  map[uint64]string // for long enums, the first name of each value
}

func (e *enumNames) lookup(n uint64) (string, bool) {
	if e.byVal != nil {
		s, ok := e.byVal[n]
		return s, ok
	}
	for i := range e.values {
		if e.values[i].Value == n {
			return e.values[i].Name, true
		}
	}
	return "", false
}

func (f *Formatter) run(dst, b []byte, steps []step, base, mark int) []byte {
	for i := 0; i < len(steps); i++ {
		s := &steps[i]
		// Make room for the literal (16 bytes at least: short ones are
		// stored whole) and a number after it.
		if cap(dst)-len(dst) < s.room {
			dst = slices.Grow(dst, s.room)
		}
		if n := s.hi - s.lo; n <= 16 {
			l := len(dst)
			w := dst[l : l+16]
			binary.LittleEndian.PutUint64(w, s.lit0)
			binary.LittleEndian.PutUint64(w[8:], s.lit1)
			dst = dst[:l+n]
		} else {
			dst = append(dst, f.text[s.lo:s.hi]...)
		}
		p := base + s.off
		switch s.op {
		case opLit:
		case opU8:
			dst = putUint(dst, uint64(b[p]))
		case opU16:
			dst = putUint(dst, uint64(binary.LittleEndian.Uint16(b[p:])))
		case opU32:
			dst = putUint(dst, uint64(binary.LittleEndian.Uint32(b[p:])))
		case opU64:
			dst = putUint(dst, binary.LittleEndian.Uint64(b[p:]))
		case opS8:
			dst = putInt(dst, int64(int8(b[p])))
		case opS16:
			dst = putInt(dst, int64(int16(binary.LittleEndian.Uint16(b[p:]))))
		case opS32:
			dst = putInt(dst, int64(int32(binary.LittleEndian.Uint32(b[p:]))))
		case opS64:
			dst = putInt(dst, int64(binary.LittleEndian.Uint64(b[p:])))
		case opUint:
			dst = putUint(dst, readUint(b[p:p+s.size]))
		case opInt:
			n := readUint(b[p : p+s.size])
			dst = putInt(dst, int64(n<<s.shift)>>s.shift)
		case opBool:
			dst = strconv.AppendBool(dst, readUint(b[p:p+s.size]) != 0)
		case opEnum:
			n := readUint(b[p : p+s.size])
			if name, ok := f.enums[s.n].lookup(n); ok {
				dst = append(dst, name...)
			} else {
				dst = putUint(dst, n)
			}
		case opPtr:
			dst = putHex(dst, binary.LittleEndian.Uint64(b[p:]))
		case opChars:
			c := b[p : p+s.n]
			if j := bytes.IndexByte(c, 0); j >= 0 {
				c = c[:j]
			}
			dst = appendQuote(dst, c)
		case opHex:
			dst = hex.AppendEncode(dst, b[p:p+s.size])
		case opRawRest:
			dst = appendRaw(dst, b[p:])
		case opBits:
			word := readUint(b[p : p+s.size])
			dst = putUint(dst, (word>>s.shift)&s.mask)
		case opLoop:
			body := steps[i+1 : i+1+s.skip]
			for k := 0; k < s.n; k++ {
				if k > 0 {
					dst = append(dst, ' ')
				}
				dst = f.run(dst, b, body, p+k*s.size, mark)
			}
			i += s.skip
		case opIf:
			if len(b) < s.n {
				i += s.skip
			}
		case opSep:
			if len(dst) > mark {
				dst = append(dst, ' ')
			}
		}
	}
	return dst
}

// pairs[x] is the two ASCII digits of x < 100, as a little-endian uint16.
var pairs = func() (t [100]uint16) {
	for x := range t {
		t[x] = uint16('0'+x/10) | uint16('0'+x%10)<<8
	}
	return t
}()

var pow10 = [...]uint64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19}

// digits8 returns the eight decimal digits of v < 1e8, leading zeros
// included, as ASCII in a little-endian uint64 (the first digit in the low
// byte).
func digits8(v uint32) uint64 {
	hi, lo := v/10000, v%10000
	return uint64(pairs[hi/100]) | uint64(pairs[hi%100])<<16 |
		uint64(pairs[lo/100])<<32 | uint64(pairs[lo%100])<<48
}

// putUint appends v in decimal (as strconv.AppendUint(dst, v, 10) does)
// into dst's spare capacity, which must hold 20 bytes. It works eight
// digits at a time and stores them as words: a shorter leading group is
// shifted into place and the bytes past it are overwritten or left beyond
// len.
func putUint(dst []byte, v uint64) []byte {
	l := len(dst)
	if v < 100 {
		if v < 10 {
			dst = dst[:l+1]
			dst[l] = byte('0' + v)
			return dst
		}
		dst = dst[:l+2]
		binary.LittleEndian.PutUint16(dst[l:], pairs[v])
		return dst
	}
	// Digits: floor(log10(v)) + 1, from the bit length.
	n := bits.Len64(v) * 1233 >> 12
	if v >= pow10[n] {
		n++
	}
	d := dst[l : l+20]
	switch {
	case n <= 8:
		binary.LittleEndian.PutUint64(d, digits8(uint32(v))>>(8*(8-n)))
	case n <= 16:
		hi := v / 1e8
		binary.LittleEndian.PutUint64(d, digits8(uint32(hi))>>(8*(16-n)))
		binary.LittleEndian.PutUint64(d[n-8:], digits8(uint32(v-hi*1e8)))
	default:
		hi := v / 1e8
		top := hi / 1e8
		binary.LittleEndian.PutUint64(d, digits8(uint32(top))>>(8*(24-n)))
		binary.LittleEndian.PutUint64(d[n-16:], digits8(uint32(hi-top*1e8)))
		binary.LittleEndian.PutUint64(d[n-8:], digits8(uint32(v-hi*1e8)))
	}
	return dst[:l+n]
}

// putInt is putUint for a signed v.
func putInt(dst []byte, v int64) []byte {
	if v < 0 {
		return putUint(append(dst, '-'), uint64(-v))
	}
	return putUint(dst, uint64(v))
}

// putHex appends v in lower-case hex without leading zeros (as "%x" does)
// into dst's spare capacity, which must hold 16 bytes.
func putHex(dst []byte, v uint64) []byte {
	const hexDigits = "0123456789abcdef"
	l := len(dst)
	n := max(1, (bits.Len64(v)+3)/4)
	dst = dst[:l+n]
	for i := l + n - 1; i >= l; i-- {
		dst[i] = hexDigits[v&0xf]
		v >>= 4
	}
	return dst
}

// appendQuote appends strconv.Quote(string(s)) without converting s to a
// string on the heap.
func appendQuote(dst, s []byte) []byte {
	for _, c := range s {
		if c < ' ' || c > '~' || c == '"' || c == '\\' {
			// strconv does not keep s: viewing it as a string is safe.
			return strconv.AppendQuote(dst, unsafe.String(unsafe.SliceData(s), len(s)))
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

func readUint(b []byte) uint64 {
	var n uint64
	for i := len(b) - 1; i >= 0; i-- {
		n = n<<8 | uint64(b[i])
	}
	return n
}

// A region is where a value lies in the record: size bytes at off. Only the
// top-level value has rest set: it may be followed by more bytes of the
// record, which some renderings (raw arrays of unsized elements, members
// lying past the struct's size) take in.
type region struct {
	off, size int
	rest      bool
}

type compiler struct {
	steps []step
	text  []byte
	pend  int // text[pend:] waits for the next step
	enums []enumNames
	index bool   // build lookup maps for long enums
	out   []byte // Format's output buffer
}

// scratch holds compilers whose buffers Format reuses.
var scratch = sync.Pool{New: func() any { return new(compiler) }}

// compile compiles t into c's buffers; the result is valid until c is
// reused.
func (c *compiler) compile(t btf.Type, index bool) Formatter {
	c.steps, c.text, c.pend, c.enums, c.index = c.steps[:0], c.text[:0], 0, c.enums[:0], index
	if t == nil {
		return Formatter{raw: true}
	}
	size, err := btf.Sizeof(t)
	if err != nil {
		return Formatter{raw: true}
	}
	c.value(t, region{size: size, rest: true}, 0)
	c.flush()
	return Formatter{size: size, steps: c.steps, text: c.text, enums: c.enums}
}

// release returns c to scratch unless its buffers grew large.
func (c *compiler) release() {
	clear(c.enums) // drop references to the types
	if cap(c.out) > 64<<10 || cap(c.text) > 64<<10 || cap(c.steps) > 1024 || cap(c.enums) > 1024 {
		return
	}
	scratch.Put(c)
}

func (c *compiler) write(s string) { c.text = append(c.text, s...) }

// emit appends a step carrying the pending text and returns its index.
func (c *compiler) emit(s step) int {
	lit := c.text[c.pend:]
	var w [16]byte
	copy(w[:], lit)
	s.lit0, s.lit1 = binary.LittleEndian.Uint64(w[:8]), binary.LittleEndian.Uint64(w[8:])
	s.lo, s.hi = c.pend, len(c.text)
	s.room = max(16, len(lit)) + numRoom
	c.pend = len(c.text)
	c.steps = append(c.steps, s)
	return len(c.steps) - 1
}

// flush turns pending text into a step of its own.
func (c *compiler) flush() {
	if len(c.text) > c.pend {
		c.emit(step{op: opLit})
	}
}

// value compiles the rendering of a value of type t lying in r.
func (c *compiler) value(t btf.Type, r region, depth int) {
	t = btf.UnderlyingType(t)
	if depth > maxDepth {
		c.write("…")
		return
	}
	switch v := t.(type) {
	case *btf.Int:
		c.integer(v, r.off)
	case *btf.Enum:
		e := enumNames{values: v.Values}
		if c.index && len(v.Values) > 16 {
			e.byVal = make(map[uint64]string, len(v.Values))
			for _, val := range v.Values {
				if _, dup := e.byVal[val.Value]; !dup {
					e.byVal[val.Value] = val.Name
				}
			}
		}
		c.emit(step{op: opEnum, off: r.off, size: int(v.Size), n: len(c.enums)})
		c.enums = append(c.enums, e)
	case *btf.Pointer:
		c.write("0x")
		c.emit(step{op: opPtr, off: r.off})
	case *btf.Array:
		elemSize, err := btf.Sizeof(v.Type)
		if err != nil || elemSize == 0 {
			c.raw(r)
			return
		}
		if isChar(v.Type) {
			c.emit(step{op: opChars, off: r.off, n: int(v.Nelems)})
			return
		}
		c.write("[")
		if v.Nelems > 0 {
			loop := c.emit(step{op: opLoop, off: r.off, size: elemSize, n: int(v.Nelems)})
			c.value(v.Type, region{size: elemSize}, depth+1)
			c.flush()
			c.steps[loop].skip = len(c.steps) - loop - 1
		}
		c.write("]")
	case *btf.Struct:
		c.members(v.Members, r, depth)
	case *btf.Union:
		c.members(v.Members, r, depth)
	default:
		if size, err := btf.Sizeof(t); err == nil {
			r = region{off: r.off, size: size}
		}
		c.raw(r)
	}
}

// raw compiles appendRaw of the bytes of r.
func (c *compiler) raw(r region) {
	switch {
	case r.rest:
		c.emit(step{op: opRawRest, off: r.off})
	case r.size == 1:
		c.emit(step{op: opU8, off: r.off})
	case r.size == 2:
		c.emit(step{op: opU16, off: r.off})
	case r.size == 4:
		c.emit(step{op: opU32, off: r.off})
	case r.size == 8:
		c.emit(step{op: opU64, off: r.off})
	case r.size > 0:
		c.emit(step{op: opHex, off: r.off, size: r.size})
	}
}

func (c *compiler) integer(t *btf.Int, off int) {
	size := int(t.Size)
	switch {
	case t.Encoding&btf.Bool != 0:
		c.emit(step{op: opBool, off: off, size: size})
	case t.Encoding&btf.Signed != 0:
		switch size {
		case 1:
			c.emit(step{op: opS8, off: off})
		case 2:
			c.emit(step{op: opS16, off: off})
		case 4:
			c.emit(step{op: opS32, off: off})
		case 8:
			c.emit(step{op: opS64, off: off})
		default:
			// Sign-extend the low bytes; sizes over 8 shift everything
			// out and print 0.
			c.emit(step{op: opInt, off: off, size: size, shift: 64 - 8*t.Size})
		}
	default:
		switch size {
		case 1:
			c.emit(step{op: opU8, off: off})
		case 2:
			c.emit(step{op: opU16, off: off})
		case 4:
			c.emit(step{op: opU32, off: off})
		case 8:
			c.emit(step{op: opU64, off: off})
		default:
			c.emit(step{op: opUint, off: off, size: size})
		}
	}
}

// members compiles a struct or union: {name=value ...}. Members that do not
// fit in the value are left out; members without a name are left out unless
// they are integers (named padding is shown). Bitfields print as unsigned
// numbers.
func (c *compiler) members(members []btf.Member, r region, depth int) {
	const (
		none  = iota // no member printed before this one
		maybe        // only members that may be left out at run time
		some         // at least one member printed for sure
	)
	before := none
	c.write("{")
	for _, m := range members {
		size, err := btf.Sizeof(m.Type)
		off := int(m.Offset.Bytes())
		if err != nil || m.Name == "" && isPadding(m.Type) {
			continue
		}
		// A member reaching past the value (malformed BTF, or a bitfield
		// whose storage unit overhangs the struct) prints only if the
		// record has the bytes: known here, except at the top level.
		cond := -1
		if off+size > r.size {
			if !r.rest {
				continue
			}
			cond = c.emit(step{op: opIf, n: r.off + off + size})
		}
		switch before {
		case some:
			c.write(" ")
		case maybe:
			// Decided at run time: every member printed writes
			// something (a name, or an integer's digits), so one was
			// printed if dst grew past the '{'.
			c.emit(step{op: opSep})
		}
		if m.Name != "" {
			c.write(m.Name)
			c.write("=")
		}
		if m.BitfieldSize > 0 {
			c.emit(step{op: opBits, off: r.off + off, size: size,
				shift: uint32(m.Offset) % 8, mask: uint64(1)<<m.BitfieldSize - 1})
		} else {
			c.value(m.Type, region{off: r.off + off, size: size}, depth+1)
		}
		if cond >= 0 {
			c.flush()
			c.steps[cond].skip = len(c.steps) - cond - 1
			before = max(before, maybe)
		} else {
			before = some
		}
	}
	c.write("}")
}

func isPadding(t btf.Type) bool {
	_, ok := btf.UnderlyingType(t).(*btf.Int)
	return !ok
}

func isChar(t btf.Type) bool {
	i, ok := btf.UnderlyingType(t).(*btf.Int)
	return ok && i.Size == 1 && (i.Encoding&btf.Char != 0 || i.Name == "char")
}
