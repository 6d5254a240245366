// Package mapjson reads the values a direct run fills maps with (gpubpf run
// --direct --map NAME=JSON, --map-file FILE.json) and writes maps back in
// the same form (--dump), so that a dump can be fed to another run.
//
// A map's JSON is, for an array (GPU array, array shared with the kernel):
//
//	[v0, v1, ...]                     values of keys 0, 1, ... (at most max_entries)
//	{"KEY": v, ...}                   some keys only
//	{"start": A, "step": B}           value[k] = A + B*k for every key ("count": N for
//	                                  keys 0..N-1 only; step defaults to 0)
//
// and for a hash map {"KEY": v, ...}. A KEY is a decimal integer (negative
// allowed) stored little-endian in the key size, or "0x" and exactly the
// key's bytes in hex. A value v is
//
//	a number                          stored little-endian in the value size: an
//	                                  integer in its range, signed or not (a float
//	                                  where the map's BTF says float)
//	[n1, n2, ...]                     numbers split evenly over the value (u32[3]: [M,N,K])
//	"0x0011..."                       exactly the value's bytes, in memory order
//
// Dumps write arrays whole ([v0, v1, ...]) and hash maps as objects; each
// value as a number where it is one (signed where BTF says so), as an array
// of numbers where BTF says it is an array of them, else as hex.
package mapjson

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/big"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
)

// Fill is entries for one map: keys and values of the map's sizes, one
// after the other (array keys are u32 indexes).
type Fill struct{ Keys, Values []byte }

// Len is the number of entries.
func (f Fill) Len(valueSize uint32) int {
	if valueSize == 0 {
		return 0
	}
	return len(f.Values) / int(valueSize)
}

// Map is what reading and writing a map's JSON needs to know of it.
type Map struct {
	Name                           string
	Kind                           gpumap.Kind
	KeySize, ValueSize, MaxEntries uint32
	// Value says how a value splits into numbers (from BTF).
	Value Scalar
}

// Scalar is how a value reads as numbers: Count elements of Size bytes,
// signed or float; Count 0 when BTF does not say (then a value of 1, 2, 4
// or 8 bytes reads as one unsigned number).
type Scalar struct {
	Size, Count   int
	Signed, Float bool
}

// FromSpec describes spec's map.
func FromSpec(name string, spec *ebpf.MapSpec) (Map, error) {
	kind, err := gpumap.KindOf(spec)
	if err != nil {
		return Map{}, err
	}
	return Map{Name: name, Kind: kind, KeySize: spec.KeySize, ValueSize: spec.ValueSize, MaxEntries: spec.MaxEntries,
		Value: scalarOf(spec.Value, int(spec.ValueSize))}, nil
}

func scalarOf(t btf.Type, size int) Scalar {
	if t == nil {
		return Scalar{}
	}
	count := 1
	t = btf.UnderlyingType(t)
	if a, ok := t.(*btf.Array); ok {
		count = int(a.Nelems)
		t = btf.UnderlyingType(a.Type)
	}
	var s Scalar
	switch v := t.(type) {
	case *btf.Int:
		s = Scalar{Size: int(v.Size), Signed: v.Encoding&btf.Signed != 0}
	case *btf.Float:
		s = Scalar{Size: int(v.Size), Float: v.Size == 4 || v.Size == 8}
	case *btf.Enum:
		s = Scalar{Size: int(v.Size), Signed: v.Signed}
	default:
		return Scalar{}
	}
	s.Count = count
	if s.Size*s.Count != size || count == 0 || !numeric(s.Size) {
		return Scalar{}
	}
	return s
}

func numeric(size int) bool { return size == 1 || size == 2 || size == 4 || size == 8 }

// fillable reports whether --map may fill m, and if not, why.
func (m Map) fillable() error {
	switch m.Kind {
	case gpumap.Array, gpumap.HostArray, gpumap.Hash:
		return nil
	}
	return fmt.Errorf("map %s is a GPU %s: --map fills arrays and hash maps only", m.Name, m.Kind)
}

func (m Map) isArray() bool { return m.Kind == gpumap.Array || m.Kind == gpumap.HostArray }

// Parse reads one map's JSON. source names where it came from, for errors
// ("--map vec_A", "ab.json").
func Parse(m Map, data []byte, source string) (Fill, error) {
	v, err := decode(data, source)
	if err != nil {
		return Fill{}, err
	}
	return parseMap(m, v, source)
}

// ParseFile reads an object NAME -> map JSON (--map-file), for maps among
// known.
func ParseFile(known map[string]Map, data []byte, source string) (map[string]Fill, error) {
	v, err := decode(data, source)
	if err != nil {
		return nil, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: want a JSON object of map names and their values, like {\"vec_A\": [1, 2, 3]}; got %s", source, kindOf(v))
	}
	out := map[string]Fill{}
	for _, name := range slices.Sorted(maps.Keys(obj)) {
		m, ok := known[name]
		if !ok {
			return nil, UnknownMap(source, name, known)
		}
		f, err := parseMap(m, obj[name], source)
		if err != nil {
			return nil, err
		}
		out[name] = f
	}
	return out, nil
}

// UnknownMap is the error for a map name that is not among known.
func UnknownMap(source, name string, known map[string]Map) error {
	names := make([]string, 0, len(known))
	for n, m := range known {
		if m.fillable() == nil && !strings.HasPrefix(n, ".rodata") { // constants: not worth suggesting
			names = append(names, n)
		}
	}
	sort.Strings(names)
	list := "none"
	if len(names) > 0 {
		list = strings.Join(names, ", ")
	}
	return fmt.Errorf("%s: no map %s among the maps the programs use; the ones to fill are %s", source, name, list)
}

// decode parses JSON keeping numbers exact.
func decode(data []byte, source string) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	if err == nil && len(bytes.TrimSpace(data[d.InputOffset():])) > 0 {
		err = errors.New("more after the JSON value")
	}
	if err != nil {
		var se *json.SyntaxError
		where := ""
		if errors.As(err, &se) {
			line, col := position(data, se.Offset)
			where = fmt.Sprintf(" at line %d, column %d", line, col)
		}
		return nil, fmt.Errorf("%s: bad JSON%s: %v; write values as JSON (e.g. [1, 2, 3], {\"start\": 0, \"step\": 1}, \"0x01020304\")", source, where, err)
	}
	return v, nil
}

func position(data []byte, off int64) (line, col int) {
	line, col = 1, 1
	for i := int64(0); i < off-1 && i < int64(len(data)); i++ {
		if data[i] == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

func parseMap(m Map, v any, source string) (Fill, error) {
	if err := m.fillable(); err != nil {
		return Fill{}, fmt.Errorf("%s: %w", source, err)
	}
	where := fmt.Sprintf("%s: map %s", source, m.Name)
	var f Fill
	add := func(key []byte, val any, what string) error {
		b, err := m.parseValue(val)
		if err != nil {
			return fmt.Errorf("%s %s: %w", where, what, err)
		}
		f.Keys = append(f.Keys, key...)
		f.Values = append(f.Values, b...)
		return nil
	}
	switch x := v.(type) {
	case []any:
		if !m.isArray() {
			return Fill{}, fmt.Errorf("%s is a hash map: give its entries as an object {\"KEY\": value, ...}", where)
		}
		if uint64(len(x)) > uint64(m.MaxEntries) {
			return Fill{}, fmt.Errorf("%s has %d entries, and the array gives %d values: give at most %d", where, m.MaxEntries, len(x), m.MaxEntries)
		}
		f.Keys = make([]byte, 0, 4*len(x))
		f.Values = make([]byte, 0, int(m.ValueSize)*len(x))
		for k, val := range x {
			if err := add(binary.LittleEndian.AppendUint32(nil, uint32(k)), val, fmt.Sprintf("key %d", k)); err != nil {
				return Fill{}, err
			}
		}
		return f, nil
	case map[string]any:
		if _, seq := x["start"]; seq && m.isArray() {
			return m.sequence(x, where)
		}
		if uint64(len(x)) > uint64(m.MaxEntries) {
			return Fill{}, fmt.Errorf("%s has %d entries, and the object gives %d: give at most %d", where, m.MaxEntries, len(x), m.MaxEntries)
		}
		for _, ks := range slices.Sorted(maps.Keys(x)) {
			key, err := m.parseKey(ks)
			if err != nil {
				return Fill{}, fmt.Errorf("%s key %q: %w", where, ks, err)
			}
			if err := add(key, x[ks], "key "+ks); err != nil {
				return Fill{}, err
			}
		}
		return f, nil
	}
	form := "an array [v0, v1, ...], an object {\"KEY\": value} or {\"start\": A, \"step\": B}"
	if !m.isArray() {
		form = "an object {\"KEY\": value, ...}"
	}
	return Fill{}, fmt.Errorf("%s: want %s; got %s", where, form, kindOf(v))
}

// parseKey reads an object's key: an array index below max_entries, or a
// hash key.
func (m Map) parseKey(s string) ([]byte, error) {
	if m.isArray() {
		base, digits := 10, s
		if strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X") {
			base, digits = 16, s[2:]
		}
		k, err := strconv.ParseUint(digits, base, 32)
		if err != nil {
			return nil, fmt.Errorf("an array's keys are indexes 0 to %d", int64(m.MaxEntries)-1)
		}
		if k >= uint64(m.MaxEntries) {
			return nil, fmt.Errorf("the map has %d entries (keys 0 to %d): use a key below %d", m.MaxEntries, int64(m.MaxEntries)-1, m.MaxEntries)
		}
		return binary.LittleEndian.AppendUint32(nil, uint32(k)), nil
	}
	if strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X") {
		return hexBytes(s, int(m.KeySize), "key")
	}
	if _, ok := new(big.Int).SetString(s, 10); !ok {
		return nil, fmt.Errorf("a key is a decimal integer or \"0x\" and its %d bytes in hex", m.KeySize)
	}
	return intBytes(s, int(m.KeySize))
}

// parseValue reads one value.
func (m Map) parseValue(v any) ([]byte, error) {
	size := int(m.ValueSize)
	switch x := v.(type) {
	case json.Number:
		return m.number(x, size, m.Value.Float && m.Value.Count == 1)
	case string:
		if !strings.HasPrefix(x, "0x") && !strings.HasPrefix(x, "0X") {
			return nil, fmt.Errorf("value %q: a string value is \"0x\" and exactly %d bytes in hex", x, size)
		}
		return hexBytes(x, size, "value")
	case []any:
		if len(x) == 0 || size%len(x) != 0 || !numeric(size/len(x)) {
			return nil, fmt.Errorf("%d numbers do not split a %d-byte value into elements of 1, 2, 4 or 8 bytes: give %s, or one \"0x\" hex string", len(x), size, splits(size))
		}
		el := size / len(x)
		float := m.Value.Float && m.Value.Size == el
		out := make([]byte, 0, size)
		for i, e := range x {
			n, ok := e.(json.Number)
			if !ok {
				return nil, fmt.Errorf("element %d of the value is %s, not a number", i, kindOf(e))
			}
			b, err := m.number(n, el, float)
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
			out = append(out, b...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("value is %s: give a number, an array of numbers or a \"0x\" hex string", kindOf(v))
}

// splits lists the element counts a value of size bytes splits into.
func splits(size int) string {
	var ns []string
	for _, el := range []int{8, 4, 2, 1} {
		if size%el == 0 && size/el > 1 && size/el <= 64 {
			ns = append(ns, strconv.Itoa(size/el))
		}
	}
	switch len(ns) {
	case 0:
		return "one number"
	case 1:
		return ns[0] + " numbers"
	}
	return strings.Join(ns[:len(ns)-1], ", ") + " or " + ns[len(ns)-1] + " numbers"
}

// number stores n in size bytes: a float where float says so, else an
// integer in the range of size bytes, signed or not.
func (m Map) number(n json.Number, size int, float bool) ([]byte, error) {
	if float {
		f, err := strconv.ParseFloat(string(n), 64)
		if err != nil {
			return nil, fmt.Errorf("value %s is not a number", n)
		}
		if size == 4 {
			if math.Abs(f) > math.MaxFloat32 && !math.IsInf(f, 0) {
				return nil, fmt.Errorf("value %s is out of range for a 4-byte float", n)
			}
			return binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(f))), nil
		}
		return binary.LittleEndian.AppendUint64(nil, math.Float64bits(f)), nil
	}
	if _, ok := new(big.Int).SetString(string(n), 10); !ok {
		return nil, fmt.Errorf("value %s is not an integer: give whole numbers (or \"0x\" hex)", n)
	}
	return intBytes(string(n), size)
}

// intBytes stores the decimal integer s little-endian in size bytes: it
// must fit as a signed or an unsigned integer of min(size, 8) bytes (wider
// values are sign- or zero-extended).
func intBytes(s string, size int) ([]byte, error) {
	bits := uint(min(size, 8) * 8)
	var u uint64
	neg := strings.HasPrefix(s, "-")
	ok := false
	if neg {
		i, err := strconv.ParseInt(s, 10, 64)
		ok = err == nil && (bits == 64 || i >= -(1<<(bits-1)))
		u = uint64(i)
	} else {
		v, err := strconv.ParseUint(s, 10, 64)
		ok = err == nil && (bits == 64 || v < 1<<bits)
		u = v
	}
	if !ok {
		lo := new(big.Int).Neg(new(big.Int).Lsh(big.NewInt(1), bits-1))
		hi := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), bits), big.NewInt(1))
		return nil, fmt.Errorf("value %s is out of range for %d-byte values: give one from %s to %s", s, size, lo, hi)
	}
	out := make([]byte, max(size, 8))
	binary.LittleEndian.PutUint64(out, u)
	if neg {
		for k := 8; k < size; k++ {
			out[k] = 0xff
		}
	}
	return out[:size], nil
}

func hexBytes(s string, size int, what string) ([]byte, error) {
	b, err := hex.DecodeString(s[2:])
	if err != nil {
		return nil, fmt.Errorf("%s %q is not hex: write \"0x\" and %d hex digits", what, s, 2*size)
	}
	if len(b) != size {
		return nil, fmt.Errorf("%s %q has %d bytes; the map's %ss have %d (%d hex digits)", what, s, len(b), what, size, 2*size)
	}
	return b, nil
}

// sequence reads {"start": A, "step": B, "count": N}.
func (m Map) sequence(x map[string]any, where string) (Fill, error) {
	for k := range x {
		if k != "start" && k != "step" && k != "count" {
			return Fill{}, fmt.Errorf("%s: a sequence is {\"start\": A, \"step\": B} (and \"count\": N); %q is none of those", where, k)
		}
	}
	size := int(m.ValueSize)
	if !numeric(size) || (m.Value.Count > 1) {
		return Fill{}, fmt.Errorf("%s: a start/step sequence fills values that are one number of 1, 2, 4 or 8 bytes; its values are %d bytes: give them one by one", where, size)
	}
	num := func(k string) (json.Number, error) {
		v, ok := x[k]
		if !ok {
			return "0", nil
		}
		n, ok := v.(json.Number)
		if !ok {
			return "", fmt.Errorf("%s: %q is %s, not a number", where, k, kindOf(v))
		}
		return n, nil
	}
	start, err := num("start")
	if err != nil {
		return Fill{}, err
	}
	step, err := num("step")
	if err != nil {
		return Fill{}, err
	}
	count := uint64(m.MaxEntries)
	if c, ok := x["count"]; ok {
		n, isNum := c.(json.Number)
		v, err := strconv.ParseUint(string(n), 10, 32)
		if !isNum || err != nil || v > uint64(m.MaxEntries) {
			return Fill{}, fmt.Errorf("%s: \"count\" is how many keys to fill, 0 to %d", where, m.MaxEntries)
		}
		count = v
	}
	f := Fill{Keys: make([]byte, 0, 4*count), Values: make([]byte, 0, uint64(size)*count)}
	if m.Value.Float {
		a, errA := strconv.ParseFloat(string(start), 64)
		b, errB := strconv.ParseFloat(string(step), 64)
		if errA != nil || errB != nil {
			return Fill{}, fmt.Errorf("%s: start and step must be numbers", where)
		}
		for k := uint64(0); k < count; k++ {
			v, err := m.number(json.Number(strconv.FormatFloat(a+b*float64(k), 'g', -1, 64)), size, true)
			if err != nil {
				return Fill{}, fmt.Errorf("%s key %d: %w", where, k, err)
			}
			f.Keys = binary.LittleEndian.AppendUint32(f.Keys, uint32(k))
			f.Values = append(f.Values, v...)
		}
		return f, nil
	}
	a, okA := new(big.Int).SetString(string(start), 10)
	b, okB := new(big.Int).SetString(string(step), 10)
	if !okA || !okB {
		return Fill{}, fmt.Errorf("%s: start and step must be integers", where)
	}
	// Linear: in range at both ends, in range everywhere.
	if count > 0 {
		if _, err := intBytes(a.String(), size); err != nil {
			return Fill{}, fmt.Errorf("%s key 0: %w", where, err)
		}
		last := new(big.Int).Add(a, new(big.Int).Mul(b, new(big.Int).SetUint64(count-1)))
		if _, err := intBytes(last.String(), size); err != nil {
			return Fill{}, fmt.Errorf("%s key %d (start + step*%d): %w", where, count-1, count-1, err)
		}
	}
	// In range, the low bits of the wrapping sum are the value's.
	ua, ub := uint64(a.Int64()), uint64(b.Int64())
	if a.Sign() >= 0 {
		ua = a.Uint64()
	}
	if b.Sign() >= 0 {
		ub = b.Uint64()
	}
	var w [8]byte
	for k := uint64(0); k < count; k++ {
		binary.LittleEndian.PutUint64(w[:], ua+ub*k)
		f.Keys = binary.LittleEndian.AppendUint32(f.Keys, uint32(k))
		f.Values = append(f.Values, w[:size]...)
	}
	return f, nil
}

func kindOf(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "the number " + string(x)
	case string:
		return fmt.Sprintf("the string %q", x)
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// AppendValue appends value v of the map as JSON, in the form Parse reads.
func (m Map) AppendValue(dst, v []byte) []byte {
	s := m.Value
	if s.Count == 0 {
		if !numeric(len(v)) {
			return appendHex(dst, v)
		}
		s = Scalar{Size: len(v), Count: 1}
	}
	if s.Size*s.Count != len(v) {
		return appendHex(dst, v)
	}
	if s.Count > 1 {
		dst = append(dst, '[')
	}
	for i := 0; i < s.Count; i++ {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendNumber(dst, v[i*s.Size:(i+1)*s.Size], s)
	}
	if s.Count > 1 {
		dst = append(dst, ']')
	}
	return dst
}

// AppendKey appends a hash key as an object key Parse reads back.
func (m Map) AppendKey(dst, k []byte) []byte {
	if m.isArray() && len(k) == 4 {
		return strconv.AppendQuote(dst, strconv.FormatUint(uint64(binary.LittleEndian.Uint32(k)), 10))
	}
	if numeric(len(k)) {
		return strconv.AppendQuote(dst, strconv.FormatUint(uintOf(k), 10))
	}
	dst = append(dst, '"')
	dst = append(dst, "0x"...)
	dst = hex.AppendEncode(dst, k)
	return append(dst, '"')
}

func appendHex(dst, v []byte) []byte {
	dst = append(dst, `"0x`...)
	dst = hex.AppendEncode(dst, v)
	return append(dst, '"')
}

func uintOf(b []byte) uint64 {
	var w [8]byte
	copy(w[:], b)
	return binary.LittleEndian.Uint64(w[:])
}

func appendNumber(dst, b []byte, s Scalar) []byte {
	u := uintOf(b)
	switch {
	case s.Float && s.Size == 4:
		f := float64(math.Float32frombits(uint32(u)))
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return appendHex(dst, b)
		}
		return strconv.AppendFloat(dst, f, 'g', -1, 32)
	case s.Float:
		f := math.Float64frombits(u)
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return appendHex(dst, b)
		}
		return strconv.AppendFloat(dst, f, 'g', -1, 64)
	case s.Signed:
		shift := 64 - 8*uint(s.Size)
		return strconv.AppendInt(dst, int64(u<<shift)>>shift, 10)
	}
	return strconv.AppendUint(dst, u, 10)
}
