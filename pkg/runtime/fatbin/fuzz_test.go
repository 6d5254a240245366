package fatbin

import (
	"bytes"
	"errors"
	"os"
	"testing"
)

// The fuzz targets check the reader's promises on arbitrary input: an error
// or a result, never a panic, and never an allocation beyond the caps.

func FuzzParse(f *testing.F) {
	if b, err := os.ReadFile("testdata/vec_add_cuda118.fatbin"); err == nil {
		f.Add(b)
	}
	f.Add(container(KindPTX, FlagCompressed, []byte{0x35, 'a', 'b', 'c', 3, 0, 0x10, 'X'}, 13))
	f.Add(container(KindELF, 0, []byte("\x7fELF\x02\x01\x01"), 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		old := MaxPayload
		MaxPayload = 1 << 20 // keep each run's memory small
		defer func() { MaxPayload = old }()
		fbs, err := Parse(b)
		if err != nil && len(fbs) > 0 && fbs[0] == nil {
			t.Fatal("nil fatbin")
		}
		for _, fb := range fbs {
			for _, e := range fb.Elements {
				if p, err := e.Payload(); err == nil && len(p) > MaxPayload {
					t.Fatalf("payload of %d bytes beyond the cap", len(p))
				}
			}
		}
		_, _ = Inventory(fbs...)
	})
}

func FuzzLZ4(f *testing.F) {
	f.Add([]byte{0x35, 'a', 'b', 'c', 3, 0, 0x10, 'X'}, uint32(13))
	f.Add([]byte{0xff, 0xff, 0xff}, uint32(1000))
	f.Add([]byte{0x1f, 'a', 1, 0, 0xff, 0x20, 0x30, 'x', 'y', 'z'}, uint32(310))
	f.Fuzz(func(t *testing.T, b []byte, n uint32) {
		want := uint64(n % (1 << 22))
		out, err := DecompressLZ4(b, want)
		if err == nil && uint64(len(out)) != want {
			t.Fatalf("decoded %d bytes, want %d", len(out), want)
		}
		ref, rerr := refLZ4(b, want)
		if (err == nil) != (rerr == nil) || !bytes.Equal(out, ref) {
			t.Fatalf("DecompressLZ4 = %x, %v; byte by byte: %x, %v", out, err, ref, rerr)
		}
	})
}

// refLZ4 is the block decoder written the plainest way (every match byte by
// byte), against which DecompressLZ4's run copies are checked.
func refLZ4(src []byte, want uint64) ([]byte, error) {
	if want == 0 || want > uint64(MaxPayload) {
		return nil, errors.New("size")
	}
	var out []byte
	ip := 0
	length := func(n int) (int, bool) {
		if n != 15 {
			return n, true
		}
		for ip < len(src) {
			c := src[ip]
			ip++
			n += int(c)
			if c != 0xff {
				return n, true
			}
		}
		return 0, false
	}
	for ip < len(src) {
		tok := src[ip]
		ip++
		lit, ok := length(int(tok >> 4))
		if !ok || lit > len(src)-ip || uint64(len(out)+lit) > want {
			return nil, errors.New("literals")
		}
		out = append(out, src[ip:ip+lit]...)
		ip += lit
		if ip >= len(src) || uint64(len(out)) >= want {
			break
		}
		if ip+2 > len(src) {
			return nil, errors.New("offset")
		}
		back := int(src[ip]) | int(src[ip+1])<<8
		ip += 2
		m, ok := length(int(tok & 15))
		if !ok {
			return nil, errors.New("match length")
		}
		m += 4
		if back == 0 || back > len(out) || uint64(len(out)+m) > want {
			return nil, errors.New("match")
		}
		for i := 0; i < m; i++ {
			out = append(out, out[len(out)-back])
		}
	}
	if uint64(len(out)) != want {
		return nil, errors.New("size")
	}
	return out, nil
}

func FuzzZstd(f *testing.F) {
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd, 0x24, 0x05, 0x29, 0, 0, 'h', 'e', 'l', 'l', 'o'}, uint32(5))
	f.Fuzz(func(t *testing.T, b []byte, n uint32) {
		want := uint64(n % (1 << 22))
		out, err := DecompressZstd(b, want)
		if err == nil && want != 0 && uint64(len(out)) != want {
			t.Fatalf("decoded %d bytes, want %d", len(out), want)
		}
	})
}

func FuzzCubinKernels(f *testing.F) {
	f.Add([]byte("\x7fELF\x02\x01\x01\x33"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, _ = CubinKernels(b)
	})
}
