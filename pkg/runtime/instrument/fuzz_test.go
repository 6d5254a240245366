package instrument

import (
	"os"
	"strings"
	"testing"

	"github.com/gpubpf/gpubpf/pkg/runtime/ptx"
)

// FuzzInstrument: whatever the parser accepts, the passes handle without
// panicking, what they produce parses again, and every memory site writes
// exactly one record (size and kind) for the probe.
func FuzzInstrument(f *testing.F) {
	for _, fx := range []string{"../ptx/testdata/vec_add_cuda118.ptx", "../ptx/testdata/clang14_kernels.ptx", "testdata/atomics_cuda118.ptx"} {
		if b, err := os.ReadFile(fx); err == nil {
			f.Add(string(b))
		}
	}
	f.Add(exitsSrc)
	f.Add(stubSrc)
	f.Add(memKernel([2]int{7, 8}, "", "", "@%p1 red.global.add.L2::cache_hint.u64 [%rd1+8], 1, %rd3;\n\tatom.shared::cta.add.u32 %r1, [smem], 1;\n\tld.global.u32 %r1, [%rd1].unified;"))
	pe, px, pm := probe("pe", true), probe("px", true), probe("pm", true)
	f.Fuzz(func(t *testing.T, src string) {
		m, err := ptx.Parse(src)
		if err != nil {
			return
		}
		g := map[string]uint64{}
		for n := range m.Vars() {
			g[n] = 0x7f0000000000
		}
		r, err := InstrumentModule(m, Request{Entry: pe, Exit: px, MemAccess: pm, Globals: g})
		if err != nil {
			return
		}
		if _, err := ptx.Parse(r.PTX); err != nil {
			t.Fatalf("instrumented PTX does not parse: %v\n%s", err, r.PTX)
		}
		if n := strings.Count(r.PTX, "mov.b64\t"+memMetaReg+", "); n != r.Sites.Mem {
			t.Fatalf("%d memory sites but %d records written:\n%s", r.Sites.Mem, n, r.PTX)
		}
	})
}
