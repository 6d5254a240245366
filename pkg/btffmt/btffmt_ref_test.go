package btffmt

// This file keeps the original recursive, type-switching implementation of
// Format as it was before Compile existed. It is the specification the
// compiled formatter must reproduce byte for byte: the tests and fuzzers
// compare Append (and Format, which now runs on Compile) against refFormat,
// and BenchmarkRefFormat measures the old cost.

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/cilium/ebpf/btf"
)

func refFormat(t btf.Type, b []byte) string {
	var sb strings.Builder
	if t == nil || !refFits(t, b) {
		refRaw(&sb, b)
		return sb.String()
	}
	refWrite(&sb, t, b, 0)
	return sb.String()
}

func refFits(t btf.Type, b []byte) bool {
	size, err := btf.Sizeof(t)
	return err == nil && size <= len(b)
}

func refRaw(sb *strings.Builder, b []byte) {
	switch len(b) {
	case 1:
		sb.WriteString(strconv.FormatUint(uint64(b[0]), 10))
	case 2:
		sb.WriteString(strconv.FormatUint(uint64(binary.LittleEndian.Uint16(b)), 10))
	case 4:
		sb.WriteString(strconv.FormatUint(uint64(binary.LittleEndian.Uint32(b)), 10))
	case 8:
		sb.WriteString(strconv.FormatUint(binary.LittleEndian.Uint64(b), 10))
	default:
		sb.WriteString(hex.EncodeToString(b))
	}
}

const refMaxDepth = 8

func refWrite(sb *strings.Builder, t btf.Type, b []byte, depth int) {
	t = btf.UnderlyingType(t)
	if depth > refMaxDepth {
		sb.WriteString("…")
		return
	}
	switch v := t.(type) {
	case *btf.Int:
		refWriteInt(sb, v, b)
	case *btf.Enum:
		n := refReadUint(b[:v.Size])
		for _, val := range v.Values {
			if val.Value == n {
				sb.WriteString(val.Name)
				return
			}
		}
		sb.WriteString(strconv.FormatUint(n, 10))
	case *btf.Pointer:
		fmt.Fprintf(sb, "0x%x", binary.LittleEndian.Uint64(b[:8]))
	case *btf.Array:
		elemSize, err := btf.Sizeof(v.Type)
		if err != nil || elemSize == 0 {
			refRaw(sb, b)
			return
		}
		if refIsChar(v.Type) {
			s := b[:v.Nelems]
			if i := refIndexByte(s, 0); i >= 0 {
				s = s[:i]
			}
			sb.WriteString(strconv.Quote(string(s)))
			return
		}
		sb.WriteByte('[')
		for i := 0; i < int(v.Nelems); i++ {
			if i > 0 {
				sb.WriteByte(' ')
			}
			refWrite(sb, v.Type, b[i*elemSize:(i+1)*elemSize], depth+1)
		}
		sb.WriteByte(']')
	case *btf.Struct:
		refWriteMembers(sb, v.Members, b, depth)
	case *btf.Union:
		refWriteMembers(sb, v.Members, b, depth)
	default:
		size, err := btf.Sizeof(t)
		if err != nil {
			size = len(b)
		}
		refRaw(sb, b[:size])
	}
}

func refWriteMembers(sb *strings.Builder, members []btf.Member, b []byte, depth int) {
	sb.WriteByte('{')
	first := true
	for _, m := range members {
		size, err := btf.Sizeof(m.Type)
		off := int(m.Offset.Bytes())
		if err != nil || off+size > len(b) {
			continue
		}
		if m.Name == "" && refIsPadding(m.Type) {
			continue
		}
		if !first {
			sb.WriteByte(' ')
		}
		first = false
		if m.Name != "" {
			sb.WriteString(m.Name)
			sb.WriteByte('=')
		}
		if m.BitfieldSize > 0 {
			word := refReadUint(b[off : off+size])
			shift := uint(m.Offset) % 8
			mask := uint64(1)<<m.BitfieldSize - 1
			sb.WriteString(strconv.FormatUint((word>>shift)&mask, 10))
			continue
		}
		refWrite(sb, m.Type, b[off:off+size], depth+1)
	}
	sb.WriteByte('}')
}

func refIsPadding(t btf.Type) bool {
	_, ok := btf.UnderlyingType(t).(*btf.Int)
	return !ok
}

func refIsChar(t btf.Type) bool {
	i, ok := btf.UnderlyingType(t).(*btf.Int)
	return ok && i.Size == 1 && (i.Encoding&btf.Char != 0 || i.Name == "char")
}

func refWriteInt(sb *strings.Builder, t *btf.Int, b []byte) {
	n := refReadUint(b[:t.Size])
	switch {
	case t.Encoding&btf.Bool != 0:
		sb.WriteString(strconv.FormatBool(n != 0))
	case t.Encoding&btf.Signed != 0:
		shift := 64 - 8*t.Size
		sb.WriteString(strconv.FormatInt(int64(n<<shift)>>shift, 10))
	default:
		sb.WriteString(strconv.FormatUint(n, 10))
	}
}

func refReadUint(b []byte) uint64 {
	var n uint64
	for i := len(b) - 1; i >= 0; i-- {
		n = n<<8 | uint64(b[i])
	}
	return n
}

func refIndexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}
