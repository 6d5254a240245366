package fatbin

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// fixture describes what cuobjdump (11.8) lists for each committed binary.
var fixtures = []struct {
	file      string
	kernels   []string // mangled
	ptx, sass []string
	codec     Compression // of the PTX element
}{
	{"vec_add_sm80_cuda118", []string{"_Z9vectorAddPKfS0_Pfi"}, []string{"compute_80"}, []string{"sm_80"}, LZ4},
	{"vec_add_sm90sass_cuda118", []string{"_Z9vectorAddPKfS0_Pfi"}, nil, []string{"sm_90"}, None},
	{"multi_default_cuda118", multiKernels, []string{"compute_52"}, []string{"sm_52"}, LZ4},
	{"multi_compressed_cuda118", multiKernels, []string{"compute_80"}, []string{"sm_70", "sm_80"}, LZ4},
	{"libmulti_cuda118.so", multiKernels, []string{"compute_75"}, []string{"sm_75"}, LZ4},
	// nvcc 13.0 on the GPU machine (gputest/build-fixtures.sh; cuobjdump's
	// listing is in cuobjdump-cuda13.txt).
	{"vec_add_default_cuda13", []string{"_Z9vectorAddPKfS0_Pfi"}, []string{"compute_75"}, []string{"sm_75"}, Zstd},
	{"vec_add_static_cuda13", []string{"_Z9vectorAddPKfS0_Pfi"}, []string{"compute_75"}, []string{"sm_75"}, Zstd},
	{"vec_add_sm90_cuda13", []string{"_Z9vectorAddPKfS0_Pfi"}, []string{"compute_90"}, []string{"sm_90"}, Zstd},
	{"vec_add_sm90sass_cuda13", []string{"_Z9vectorAddPKfS0_Pfi"}, nil, []string{"sm_90"}, None},
	{"multi_sm90_cuda13", multiKernels, []string{"compute_90"}, []string{"sm_90"}, Zstd},
	{"libmulti_cuda13.so", multiKernels, []string{"compute_75"}, []string{"sm_75"}, Zstd},
	// -rdc: __nv_relfatbin, with the cubin zstd-compressed as well.
	{"multi_rdc_cuda13.o", multiKernels, []string{"compute_90"}, []string{"sm_90"}, Zstd},
}

var multiKernels = []string{"_Z4axpyIdEvT_PKS0_PS0_i", "_Z4axpyIfEvT_PKS0_PS0_i", "_Z4fillPiii", "_Z5scalePfi", "_ZN2ns6reduceEPKfPfi"}

func TestFixtures(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.file, func(t *testing.T) {
			fbs, err := FromELF(filepath.Join("testdata", fx.file))
			if err != nil {
				t.Fatal(err)
			}
			ks, err := Inventory(fbs...)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, k := range ks {
				names = append(names, k.Name)
				if !slices.Equal(k.PTXArchs, fx.ptx) && !(len(k.PTXArchs) == 0 && len(fx.ptx) == 0) {
					t.Errorf("%s: PTX archs %v, want %v", k.Name, k.PTXArchs, fx.ptx)
				}
				if !slices.Equal(k.SASSArchs, fx.sass) {
					t.Errorf("%s: SASS archs %v, want %v", k.Name, k.SASSArchs, fx.sass)
				}
				if k.HasPTX != (len(fx.ptx) > 0) {
					t.Errorf("%s: HasPTX %v", k.Name, k.HasPTX)
				}
			}
			slices.Sort(names)
			if !slices.Equal(names, fx.kernels) {
				t.Errorf("kernels %v, want %v", names, fx.kernels)
			}
			// each container read again alone from its file offset is the same
			f, err := os.Open(filepath.Join("testdata", fx.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for _, fb := range fbs {
				again, err := ReadContainerAt(f, fb.FileOffset, fx.file)
				if err != nil || fb.FileOffset == 0 {
					t.Fatalf("container at file offset %#x: %v", fb.FileOffset, err)
				}
				if again.Size != fb.Size || len(again.Elements) != len(fb.Elements) {
					t.Fatalf("container at %#x read again: %d elements of %d bytes, want %d of %d", fb.FileOffset, len(again.Elements), again.Size, len(fb.Elements), fb.Size)
				}
				for i, e := range fb.Elements {
					if !bytes.Equal(again.Elements[i].Stored(), e.Stored()) {
						t.Errorf("container at %#x, element %d differs when read again", fb.FileOffset, i)
					}
				}
			}
			for _, fb := range fbs {
				for _, e := range fb.Elements {
					if e.Kind == KindELF {
						// The SM in the cubin's e_flags agrees with the
						// element header (ELF ABI 7 for 11.8, 8 for 13).
						p, err := e.Payload()
						if err != nil {
							t.Fatal(err)
						}
						if _, sm, err := CubinKernels(p); err != nil || sm != e.SM {
							t.Errorf("cubin at %#x: e_flags SM %d, header %d (%v)", e.Offset, sm, e.SM, err)
						}
					}
					if e.Kind == KindPTX {
						if e.Compression() != fx.codec {
							t.Errorf("PTX codec %v, want %v", e.Compression(), fx.codec)
						}
						p, err := e.Payload()
						if err != nil {
							t.Fatal(err)
						}
						if !bytes.HasPrefix(bytes.TrimLeft(p, "\n"), []byte(".version ")) || !bytes.Contains(p, []byte(".target sm_")) || !bytes.Contains(p, []byte(".entry ")) {
							t.Errorf("decompressed PTX does not look like PTX: %.80q", p)
						}
						if e.Major == 0 {
							t.Errorf("PTX element without ISA version")
						}
					}
				}
			}
		})
	}
}

func TestSASSOnlyAdvice(t *testing.T) {
	fbs, err := FromELF("testdata/vec_add_sm90sass_cuda118")
	if err != nil {
		t.Fatal(err)
	}
	ks := Kernels(fbs...)
	if len(ks) != 1 || ks[0].HasPTX {
		t.Fatalf("kernels %+v", ks)
	}
	want := "kernel vectorAdd has only sm_90 SASS, no PTX: rebuild with -gencode arch=compute_90,code=compute_90 to trace it"
	if got := ks[0].Advice(); got != want {
		t.Errorf("advice %q\nwant %q", got, want)
	}
	if _, _, err := PTXFor(fbs, "_Z9vectorAddPKfS0_Pfi", 0); err == nil || err.Error() != want {
		t.Errorf("PTXFor error %v", err)
	}
}

func TestRawFatbinFile(t *testing.T) {
	b, err := os.ReadFile("testdata/vec_add_cuda118.fatbin")
	if err != nil {
		t.Fatal(err)
	}
	fbs, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	e, p, err := PTXFor(fbs, "_Z9vectorAddPKfS0_Pfi", 0)
	if err != nil {
		t.Fatal(err)
	}
	if e.Arch() != "compute_80" || !bytes.Contains(p, []byte(".const .align 4 .u32 d_N;")) {
		t.Errorf("arch %s, PTX %.200q", e.Arch(), p)
	}
	// Offsets are relative to the buffer: the element header is there.
	if k := binary.LittleEndian.Uint16(b[e.Offset:]); Kind(k) != KindPTX {
		t.Errorf("offset %#x does not point at the element header", e.Offset)
	}
}

func TestRawFatbinCUDA13(t *testing.T) {
	fbs := parseFile(t, "testdata/vec_add_cuda13.fatbin")
	e, p, err := PTXFor(fbs, "_Z9vectorAddPKfS0_Pfi", 0)
	if err != nil {
		t.Fatal(err)
	}
	if e.Compression() != Zstd || e.Major != 9 || e.Minor != 0 || !bytes.Contains(p, []byte(".version 9.0")) {
		t.Errorf("element %s %d.%d %v", e.Arch(), e.Major, e.Minor, e.Compression())
	}
	// maxSM below every PTX: nothing the device could JIT.
	if _, _, err := PTXFor(fbs, "_Z9vectorAddPKfS0_Pfi", 80); err == nil || !strings.Contains(err.Error(), "only sm_90 SASS") {
		t.Errorf("PTXFor(maxSM 80) = %v", err)
	}
}

// FromFile tells an ELF file, a fatbin file and anything else apart by
// their first bytes.
func TestFromFile(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte{0x50, 0xed}, 0o644); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file, source string // source: the first fatbin's
		err          error
		errText      string
	}{
		{file: "testdata/vec_add_sm80_cuda118", source: "testdata/vec_add_sm80_cuda118:.nv_fatbin"},
		{file: "testdata/libmulti_cuda13.so", source: "testdata/libmulti_cuda13.so:.nv_fatbin"},
		{file: "testdata/vec_add_cuda118.fatbin", source: "testdata/vec_add_cuda118.fatbin"},
		{file: "testdata/vec_add.cu", err: ErrNotFatbinFile, errText: "vec_add.cu: not a readable ELF file or fatbin"},
		{file: short, err: ErrNotFatbinFile},
		{file: exe, err: ErrNoFatbin},
		{file: filepath.Join(dir, "none"), err: os.ErrNotExist},
	} {
		fbs, err := FromFile(c.file)
		if c.err != nil {
			if !errors.Is(err, c.err) || !strings.Contains(fmt.Sprint(err), c.errText) {
				t.Errorf("%s: error %v, want %v (saying %q)", c.file, err, c.err, c.errText)
			}
			continue
		}
		if err != nil || len(fbs) == 0 || fbs[0].Source != c.source {
			t.Errorf("%s: %d fatbins, error %v; want fatbins, the first from %q", c.file, len(fbs), err, c.source)
			continue
		}
		if ks, err := Inventory(fbs...); err != nil || len(ks) == 0 {
			t.Errorf("%s: kernels %v, error %v", c.file, ks, err)
		}
	}
}

func TestNoFatbin(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	_, err = FromELF(exe)
	if !IsNoFatbin(err) {
		t.Errorf("FromELF(test binary) = %v, want ErrNoFatbin", err)
	}
}

// memReader is a process's memory: the wrapper and the container at fake addresses.
type memReader map[int64][]byte

func (m memReader) ReadAt(p []byte, off int64) (int, error) {
	for a, b := range m {
		if off >= a && off+int64(len(p)) <= a+int64(len(b)) {
			return copy(p, b[off-a:]), nil
		}
	}
	return 0, os.ErrNotExist
}

func TestWrapper(t *testing.T) {
	b, err := os.ReadFile("testdata/vec_add_cuda118.fatbin")
	if err != nil {
		t.Fatal(err)
	}
	w := make([]byte, WrapperSize)
	binary.LittleEndian.PutUint32(w, WrapperMagic)
	binary.LittleEndian.PutUint32(w[4:], 1)
	binary.LittleEndian.PutUint64(w[8:], 0x7f0000)
	mem := memReader{0x1000: w, 0x7f0000: b}
	fb, err := ReadFromWrapper(mem, 0x1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(Kernels(fb)) != 1 {
		t.Errorf("kernels from wrapper: %+v", Kernels(fb))
	}
	if _, err := ParseWrapper(b); err == nil || !strings.Contains(err.Error(), "magic") {
		t.Errorf("ParseWrapper(container) = %v", err)
	}
	if _, err := Parse(w); err == nil || !strings.Contains(err.Error(), "wrapper") {
		t.Errorf("Parse(wrapper) = %v", err)
	}
}

// lz4Literal encodes data as one literal-only LZ4 sequence (what a
// compressor emits for incompressible input).
func lz4Literal(data []byte) []byte {
	n := len(data)
	var out []byte
	if n < 15 {
		out = append(out, byte(n<<4))
	} else {
		out = append(out, 0xf0)
		r := n - 15
		for r >= 255 {
			out = append(out, 255)
			r -= 255
		}
		out = append(out, byte(r))
	}
	return append(out, data...)
}

func TestLZ4(t *testing.T) {
	// "abcabcabcabcX": literals "abc", match offset 3 length 9 (overlapping), then "X".
	src := []byte{0x35, 'a', 'b', 'c', 3, 0, 0x10, 'X'}
	got, err := DecompressLZ4(src, 13)
	if err != nil || string(got) != "abcabcabcabcX" {
		t.Fatalf("got %q, %v", got, err)
	}
	long := bytes.Repeat([]byte("0123456789abcdef"), 40)
	if got, err := DecompressLZ4(lz4Literal(long), uint64(len(long))); err != nil || !bytes.Equal(got, long) {
		t.Fatalf("literal run: %v", err)
	}
	for _, bad := range []struct {
		src  []byte
		want uint64
		msg  string
	}{
		{[]byte{0x35, 'a', 'b', 'c', 9, 0, 0}, 13, "before the output start"},
		{[]byte{0xf0}, 20, "truncated literal length"},
		{[]byte{0x50, 'a'}, 5, "overrun"},
		{src, 5, "exceeds the declared"},
		{src, 20, "header says 20"},
		{src, 0, "out of range"},
		{src, 1 << 40, "out of range"},
	} {
		if _, err := DecompressLZ4(bad.src, bad.want); err == nil || !strings.Contains(err.Error(), bad.msg) {
			t.Errorf("DecompressLZ4(%x, %d) = %v, want error with %q", bad.src, bad.want, err, bad.msg)
		}
	}
}

func TestZstd(t *testing.T) {
	enc, _ := zstd.NewWriter(nil)
	plain := bytes.Repeat([]byte(".reg .b32 %r<7>;\n"), 100)
	c := enc.EncodeAll(plain, nil)
	got, err := DecompressZstd(c, uint64(len(plain)))
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("round trip: %v", err)
	}
	if _, err := DecompressZstd(c, 10); err == nil {
		t.Error("size mismatch not reported")
	}
	if _, err := DecompressZstd(c[:len(c)/2], 0); err == nil {
		t.Error("truncated frame not reported")
	}
	if _, err := DecompressZstd([]byte("nope"), 0); err == nil || !strings.Contains(err.Error(), "magic") {
		t.Errorf("bad magic: %v", err)
	}
}

// container builds a fatbin container with one PTX element stored as given.
func container(kind Kind, flags uint64, payload []byte, uncompressed int) []byte {
	pad := (len(payload) + 7) &^ 7
	el := make([]byte, 64+pad)
	le := binary.LittleEndian
	le.PutUint16(el[0:], uint16(kind))
	le.PutUint16(el[2:], 0x101)
	le.PutUint32(el[4:], 64)
	le.PutUint64(el[8:], uint64(pad))
	if flags&(FlagZstd|FlagCompressed) != 0 {
		le.PutUint32(el[16:], uint32(len(payload)))
		le.PutUint64(el[56:], uint64(uncompressed))
	}
	le.PutUint16(el[24:], 8)
	le.PutUint16(el[26:], 9)
	le.PutUint32(el[28:], 90)
	le.PutUint64(el[40:], flags|Flag64Bit|FlagLinux)
	copy(el[64:], payload)
	h := make([]byte, 16)
	le.PutUint32(h, ContainerMagic)
	le.PutUint16(h[4:], 1)
	le.PutUint16(h[6:], 16)
	le.PutUint64(h[8:], uint64(len(el)))
	return append(h, el...)
}

func TestSyntheticZstdContainer(t *testing.T) {
	// CUDA 13 layout: zstd-compressed PTX with flag 0x8000.
	ptx := []byte("//\n.version 9.0\n.target sm_90\n.address_size 64\n.visible .entry k1()\n{\n\tret;\n}\n.entry k2 (\n)\n{\n\tret;\n}\n")
	enc, _ := zstd.NewWriter(nil)
	c := container(KindPTX, FlagZstd, enc.EncodeAll(ptx, nil), len(ptx))
	two := append(append(append([]byte{}, c...), make([]byte, 8)...), c...)
	fbs, err := Parse(two)
	if err != nil || len(fbs) != 2 {
		t.Fatalf("Parse: %d fatbins, %v", len(fbs), err)
	}
	e := fbs[1].Elements[0]
	if e.Compression() != Zstd || e.Arch() != "compute_90" || e.Major != 9 || e.Minor != 8 {
		t.Errorf("element %+v", e)
	}
	p, err := e.Payload()
	if err != nil || !bytes.Equal(p, ptx) {
		t.Fatalf("payload %q %v", p, err)
	}
	ks := Kernels(fbs...)
	if len(ks) != 2 || ks[0].Name != "k1" || ks[1].Name != "k2" {
		t.Errorf("kernels %+v", ks)
	}
}

func TestMalformed(t *testing.T) {
	good := container(KindPTX, 0, []byte(".entry k()\n{ret;}\n"), 0)
	cases := map[string]struct {
		b   []byte
		msg string
	}{
		"empty":        {nil, ""},
		"bad magic":    {[]byte("\x01\x02\x03\x04\x05\x06\x07\x08"), "no fatbin container magic at offset 0x0"},
		"short header": {good[:10], "truncated container header"},
		"overrun":      {good[:len(good)-8], "claims"},
		"huge":         {func() []byte { b := slices.Clone(good); binary.LittleEndian.PutUint64(b[8:], 1<<50); return b }(), "exceeds"},
		"elem size":    {func() []byte { b := slices.Clone(good); binary.LittleEndian.PutUint64(b[16+8:], 1<<20); return b }(), "overruns the container"},
		"hdr size":     {func() []byte { b := slices.Clone(good); binary.LittleEndian.PutUint32(b[16+4:], 8); return b }(), "header size 8 out of range"},
		"kind":         {func() []byte { b := slices.Clone(good); binary.LittleEndian.PutUint16(b[16:], 999); return b }(), "unknown kind 999"},
	}
	for name, c := range cases {
		_, err := Parse(c.b)
		if c.msg == "" {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.msg) || !strings.Contains(err.Error(), "offset") {
			t.Errorf("%s: error %v, want one with %q and an offset", name, err, c.msg)
		}
	}
}

// TestIndex: an Index answers as PTXFor does, with its own text for every
// kernel of an element (read once), and the same refusals.
func TestIndex(t *testing.T) {
	fbs := parseFile(t, "testdata/vec_add_cuda13.fatbin")
	x := NewIndex(fbs)
	e1, p1, err := x.PTXFor("_Z9vectorAddPKfS0_Pfi", 0)
	if err != nil {
		t.Fatal(err)
	}
	e2, p2, err := x.PTXFor("_Z9vectorAddPKfS0_Pfi", 0)
	if err != nil || e1 != e2 || &p1[0] != &p2[0] {
		t.Errorf("second query: %v, same element %v, same text %v", err, e1 == e2, err == nil && &p1[0] == &p2[0])
	}
	e0, p0, _ := PTXFor(fbs, "_Z9vectorAddPKfS0_Pfi", 0)
	if e0 != e1 || !bytes.Equal(p0, p1) {
		t.Errorf("index and PTXFor disagree: %s / %s", e0.Arch(), e1.Arch())
	}
	for _, c := range []struct {
		kernel string
		maxSM  int
		want   string
	}{
		{"_Z9vectorAddPKfS0_Pfi", 80, "only sm_90 SASS"},
		{"_Z6absentv", 0, "not in these fatbins"},
	} {
		if _, _, err := x.PTXFor(c.kernel, c.maxSM); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("PTXFor(%s, %d) = %v, want %q", c.kernel, c.maxSM, err, c.want)
		}
	}
}

// parseFile parses a fatbin file of testdata.
func parseFile(t *testing.T, name string) []*Fatbin {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	fbs, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return fbs
}

// DeviceCodeBytes: the fatbin sections' size from the headers, as FromELF
// reads them; 0 for a file without device code or not ELF.
func TestDeviceCodeBytes(t *testing.T) {
	for _, file := range []string{"testdata/libmulti_cuda13.so", "testdata/multi_rdc_cuda13.o"} {
		fbs, err := FromELF(file)
		if err != nil {
			t.Fatal(err)
		}
		var want int64
		for _, fb := range fbs {
			want += int64(containerHeaderSize) + int64(fb.Size)
		}
		if got := DeviceCodeBytes(file); got < want || got == 0 {
			t.Errorf("%s: %d bytes, want at least its containers' %d", file, got, want)
		}
	}
	for _, file := range []string{"testdata/vec_add.cu", "testdata/missing"} {
		if got := DeviceCodeBytes(file); got != 0 {
			t.Errorf("%s: %d, want 0", file, got)
		}
	}
}
