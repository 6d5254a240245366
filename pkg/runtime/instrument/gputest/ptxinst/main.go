// Command ptxinst makes the instrumented clone the GPU check loads: it reads
// a kernel's PTX from an executable, a fatbin or a .ptx file, instruments it
// with the counting probes of package gputest and writes the clone's PTX.
// The harness (ptxcheck.cu) runs it after it has loaded the original module,
// passing the original's variable addresses.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gpubpf/gpubpf/pkg/runtime/instrument"
	"github.com/gpubpf/gpubpf/pkg/runtime/instrument/gputest"
	"github.com/gpubpf/gpubpf/pkg/runtime/ptx"
)

type globals map[string]uint64

func (g globals) String() string { return fmt.Sprint(map[string]uint64(g)) }
func (g globals) Set(s string) error {
	n, a, ok := strings.Cut(s, "=")
	v, err := strconv.ParseUint(a, 0, 64)
	if !ok || err != nil {
		return fmt.Errorf("want NAME=ADDRESS, got %q", s)
	}
	g[n] = v
	return nil
}

func main() {
	g := globals{}
	in := flag.String("in", "", "executable, shared library, fatbin or .ptx file")
	kernel := flag.String("kernel", "", "kernel selection pattern")
	counters := flag.Uint64("counters", 0, "device address of the probes' u64 counters")
	argOff := flag.Int("argoff", 24, "offset of the u32 kernel parameter the entry probe sums")
	out := flag.String("o", "", "output PTX file")
	maxPTX := flag.String("maxptx", "", "highest PTX ISA the driver accepts (e.g. 9.0)")
	flag.Var(g, "global", "NAME=ADDRESS of an original module variable (repeatable)")
	flag.Parse()
	if err := run(*in, *kernel, *counters, *argOff, *out, *maxPTX, g); err != nil {
		fmt.Fprintln(os.Stderr, "ptxinst:", err)
		os.Exit(1)
	}
}

func run(in, kernel string, counters uint64, argOff int, out, maxPTX string, g globals) error {
	if in == "" || kernel == "" || counters == 0 || out == "" {
		return fmt.Errorf("need -in, -kernel, -counters and -o")
	}
	t0 := time.Now()
	src, _, err := instrument.PTXFromFile(in, kernel)
	if err != nil {
		return err
	}
	tExtract := time.Since(t0)
	entry, exit, mem := gputest.CounterProbes(counters, argOff)
	req := instrument.Request{Kernels: []string{kernel}, Entry: entry, Exit: exit, MemAccess: mem, Globals: g}
	if maxPTX != "" {
		if req.MaxPTX, err = ptx.ParseVersion(maxPTX); err != nil {
			return err
		}
	}
	t1 := time.Now()
	r, err := instrument.Instrument(src, req)
	if err != nil {
		return err
	}
	tInst := time.Since(t1)
	if err := os.WriteFile(out, []byte(r.PTX), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "ptxinst: %s: kernels %v, funcs %v, aliased %v, fresh %v, sites %+v, PTX %d -> %d bytes, extract %v, instrument %v\n",
		in, r.Kernels, r.Funcs, r.Aliased, r.Fresh, r.Sites, len(src), len(r.PTX), tExtract, tInst)
	return nil
}
