package fatbin

import (
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
	f.Fuzz(func(t *testing.T, b []byte, n uint32) {
		want := uint64(n % (1 << 22))
		out, err := DecompressLZ4(b, want)
		if err == nil && uint64(len(out)) != want {
			t.Fatalf("decoded %d bytes, want %d", len(out), want)
		}
	})
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
