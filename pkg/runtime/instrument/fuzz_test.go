package instrument

import (
	"os"
	"testing"

	"github.com/gpubpf/gpubpf/pkg/runtime/ptx"
)

// FuzzInstrument: whatever the parser accepts, the passes handle without
// panicking, and what they produce parses again.
func FuzzInstrument(f *testing.F) {
	for _, fx := range []string{"../ptx/testdata/vec_add_cuda118.ptx", "../ptx/testdata/clang14_kernels.ptx"} {
		if b, err := os.ReadFile(fx); err == nil {
			f.Add(string(b))
		}
	}
	f.Add(exitsSrc)
	f.Add(stubSrc)
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
	})
}
