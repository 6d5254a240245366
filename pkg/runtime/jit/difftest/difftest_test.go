package difftest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpubpf/gpubpf/internal/testenv"
	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
	"github.com/gpubpf/gpubpf/pkg/runtime/jit"
)

// Per-program region of the GPU buffer.
const (
	offRes   = 0
	offData  = offRes + gpumap.HeaderSize + ResSize
	offHash  = offData + gpumap.HeaderSize + DataEntries*8
	offRet   = offHash + gpumap.HeaderSize + 16*24
	region   = 2048
	perMod   = 500
	hashKeyB = 8
)

func placements(base uint64) map[string]gpumap.Placement {
	return map[string]gpumap.Placement{
		"res":  {Kind: gpumap.Array, Addr: base + offRes, KeySize: 4, ValueSize: ResSize, MaxEntries: 1},
		"data": {Kind: gpumap.Array, Addr: base + offData, KeySize: 4, ValueSize: 8, MaxEntries: DataEntries},
		"h":    {Kind: gpumap.Hash, Addr: base + offHash, KeySize: 8, ValueSize: 8, MaxEntries: HashMax},
	}
}

// outcome is what one program leaves behind.
type outcome struct {
	ret  uint32
	res  []byte
	data [DataEntries]uint64
	hash [HashKeys]int64 // -1: absent
	err  string
}

func (o *outcome) String() string {
	return fmt.Sprintf("ret=%#x res=%x data=%x hash=%v err=%q", o.ret, o.res, o.data, o.hash, o.err)
}

func (o *outcome) equal(p *outcome) bool {
	return o.ret == p.ret && bytes.Equal(o.res, p.res) && o.data == p.data && o.hash == p.hash && o.err == p.err
}

// kernelRunner runs programs in the Linux kernel with BPF_PROG_TEST_RUN.
type kernelRunner struct {
	res, data, h *ebpf.Map
}

func newKernelRunner() (*kernelRunner, error) {
	var k kernelRunner
	var err error
	if k.res, err = ebpf.NewMap(&ebpf.MapSpec{Name: "res", Type: ebpf.Array, KeySize: 4, ValueSize: ResSize, MaxEntries: 1}); err != nil {
		return nil, err
	}
	if k.data, err = ebpf.NewMap(&ebpf.MapSpec{Name: "data", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: DataEntries}); err != nil {
		return nil, err
	}
	if k.h, err = ebpf.NewMap(&ebpf.MapSpec{Name: "h", Type: ebpf.Hash, KeySize: 8, ValueSize: 8, MaxEntries: HashMax}); err != nil {
		return nil, err
	}
	return &k, nil
}

func (k *kernelRunner) close() { k.res.Close(); k.data.Close(); k.h.Close() }

func (k *kernelRunner) run(seed int64, insns asm.Instructions) (*outcome, error) {
	if err := k.res.Put(uint32(0), make([]byte, ResSize)); err != nil {
		return nil, err
	}
	for i := 0; i < DataEntries; i++ {
		if err := k.data.Put(uint32(i), DataInit(seed, i)); err != nil {
			return nil, err
		}
	}
	for key := uint64(0); key < HashKeys; key++ {
		k.h.Delete(key)
	}
	is := make(asm.Instructions, len(insns))
	copy(is, insns)
	for name, m := range map[string]*ebpf.Map{"res": k.res, "data": k.data, "h": k.h} {
		if err := is.AssociateMap(name, m); err != nil && !strings.Contains(err.Error(), "unsatisfied") {
			// A program need not use every map.
			_ = err
		}
	}
	prog, err := ebpf.NewProgramWithOptions(&ebpf.ProgramSpec{Name: "difftest", Type: ebpf.SocketFilter, License: "GPL", Instructions: is},
		ebpf.ProgramOptions{LogLevel: ebpf.LogLevelBranch, LogSizeStart: 1 << 20})
	if err != nil {
		return nil, fmt.Errorf("kernel refused program %d: %w", seed, err)
	}
	defer prog.Close()
	ret, err := prog.Run(&ebpf.RunOptions{Data: make([]byte, 64)})
	if err != nil {
		return nil, err
	}
	o := &outcome{ret: ret, res: make([]byte, ResSize)}
	if err := k.res.Lookup(uint32(0), &o.res); err != nil {
		return nil, err
	}
	for i := 0; i < DataEntries; i++ {
		if err := k.data.Lookup(uint32(i), &o.data[i]); err != nil {
			return nil, err
		}
	}
	for key := uint64(0); key < HashKeys; key++ {
		var v uint64
		if err := k.h.Lookup(key, &v); err != nil {
			o.hash[key] = -1
		} else {
			o.hash[key] = int64(v)
		}
	}
	return o, nil
}

// gpuImage is the initial buffer region of program seed.
func gpuImage(base uint64, seed int64) []byte {
	img := make([]byte, region)
	pl := placements(base)
	copy(img[offRes:], gpumap.Init(pl["res"]))
	d := gpumap.Init(pl["data"])
	for i := 0; i < DataEntries; i++ {
		binary.LittleEndian.PutUint64(d[gpumap.HeaderSize+8*i:], DataInit(seed, i))
	}
	copy(img[offData:], d)
	copy(img[offHash:], gpumap.Init(pl["h"]))
	return img
}

func gpuOutcome(reg []byte, base uint64) *outcome {
	pl := placements(base)
	o := &outcome{ret: uint32(binary.LittleEndian.Uint64(reg[offRet:])), res: append([]byte(nil), reg[offRes+gpumap.HeaderSize:offRes+gpumap.HeaderSize+ResSize]...)}
	for i := 0; i < DataEntries; i++ {
		o.data[i] = binary.LittleEndian.Uint64(reg[offData+gpumap.HeaderSize+8*i:])
	}
	hs := reg[offHash : offHash+gpumap.SizeOf(pl["h"])]
	for key := uint64(0); key < HashKeys; key++ {
		kb := binary.LittleEndian.AppendUint64(nil, key)
		if v, ok := gpumap.HashLookup(hs, pl["h"], kb); ok {
			o.hash[key] = int64(binary.LittleEndian.Uint64(v))
		} else {
			o.hash[key] = -1
		}
	}
	return o
}

// module builds a PTX module of programs [first, first+n) with entries e_i.
func module(fns []*jit.Function, rets []uint64) string {
	var b strings.Builder
	b.WriteString(".version 7.8\n.target sm_90\n.address_size 64\n\n")
	for i, f := range fns {
		b.WriteString(f.PTX)
		fmt.Fprintf(&b, `.visible .entry e_%d()
{
	.reg .b64 %%x<2>;
	{
	.param .b64 rv;
	.param .b64 a;
	st.param.b64 [a], 0;
	call.uni (rv), %s, (a);
	ld.param.b64 %%x0, [rv];
	}
	mov.u64 %%x1, 0x%X;
	st.u64 [%%x1], %%x0;
	ret;
}

`, i, f.Name, rets[i])
	}
	return b.String()
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestDifferential runs generated programs in the kernel and, with
// GPUBPF_DIFFTEST_HARNESS set (scripts/gpu/jit-difftest.sh), on the GPU,
// and compares. Without a GPU it still runs the kernel side and assembles
// the modules with ptxas when available.
func TestDifferential(t *testing.T) {
	testenv.Root(t)
	n := envInt("GPUBPF_DIFFTEST_N", 300)
	seed0 := int64(envInt("GPUBPF_DIFFTEST_SEED", 1))
	progs := make([]asm.Instructions, n)
	for i := range progs {
		progs[i] = Program(seed0 + int64(i))
	}
	// Kernel side, in parallel.
	start := time.Now()
	want := make([]*outcome, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var kerrs []string
	next := 0
	for w := 0; w < runtime.NumCPU(); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := newKernelRunner()
			if err != nil {
				mu.Lock()
				kerrs = append(kerrs, err.Error())
				mu.Unlock()
				return
			}
			defer k.close()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n {
					return
				}
				o, err := k.run(seed0+int64(i), progs[i])
				mu.Lock()
				if err != nil {
					kerrs = append(kerrs, fmt.Sprintf("program %d: %v", seed0+int64(i), err))
				}
				want[i] = o
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(kerrs) > 0 {
		t.Fatalf("%d programs failed in the kernel, first: %s", len(kerrs), kerrs[0])
	}
	t.Logf("kernel side: %d programs in %v", n, time.Since(start))
	start = time.Now()

	// GPU side: modules of perMod programs, spread over several harness
	// processes because the driver's PTX JIT is CPU-bound.
	workers := envInt("GPUBPF_DIFFTEST_WORKERS", 8)
	var hs []*harness
	for w := 0; w < workers; w++ {
		h := startHarness(t, uint64(perMod*region))
		if h == nil {
			break
		}
		hs = append(hs, h)
	}
	build := func(first, cnt int, base uint64) (string, []byte, time.Duration) {
		fns := make([]*jit.Function, cnt)
		rets := make([]uint64, cnt)
		img := make([]byte, 0, cnt*region)
		var ct time.Duration
		for j := 0; j < cnt; j++ {
			i := first + j
			rb := base + uint64(j*region)
			c0 := time.Now()
			f, err := jit.Compile(&ebpf.ProgramSpec{Name: fmt.Sprintf("p%d", seed0+int64(i)), Instructions: progs[i]},
				jit.Options{Maps: placements(rb), FuncName: fmt.Sprintf("prog_%d", j)})
			ct += time.Since(c0)
			if err != nil {
				t.Errorf("compiling program %d: %v", seed0+int64(i), err)
				return "", nil, ct
			}
			fns[j], rets[j] = f, rb+offRet
			img = append(img, gpuImage(rb, seed0+int64(i))...)
		}
		return module(fns, rets), img, ct
	}
	if len(hs) == 0 {
		// No GPU: assemble the first module with ptxas.
		mod, _, ct := build(0, min(perMod, n), 0x7f0000000000)
		t.Logf("compile: %v for %d programs", ct, min(perMod, n))
		if mod != "" {
			assembleSample(t, mod)
		}
		return
	}
	var mismatches, ran int
	var compileTime time.Duration
	jobs := make(chan int)
	var gw sync.WaitGroup
	for _, h := range hs {
		gw.Add(1)
		go func(h *harness) {
			defer gw.Done()
			for first := range jobs {
				cnt := min(perMod, n-first)
				mod, img, ct := build(first, cnt, h.addr)
				if mod == "" {
					continue
				}
				out, line, err := h.run(mod, img, cnt, 1, 1)
				mu.Lock()
				compileTime += ct
				if err != nil {
					t.Errorf("programs %d-%d: %v", seed0+int64(first), seed0+int64(first+cnt-1), err)
					mismatches += cnt
					mu.Unlock()
					continue
				}
				t.Logf("module %d: %s", first/perMod, line)
				for j := 0; j < cnt; j++ {
					i := first + j
					got := gpuOutcome(out[j*region:(j+1)*region], h.addr+uint64(j*region))
					ran++
					if !got.equal(want[i]) {
						mismatches++
						if mismatches <= 10 {
							t.Errorf("program %d differs:\nkernel %v\ngpu    %v\n%v", seed0+int64(i), want[i], got, progs[i])
						}
					}
				}
				mu.Unlock()
			}
		}(h)
	}
	for first := 0; first < n; first += perMod {
		jobs <- first
	}
	close(jobs)
	gw.Wait()
	t.Logf("compile: %v for %d programs; GPU side %v with %d harnesses", compileTime, n, time.Since(start), len(hs))
	msg := fmt.Sprintf("difftest: %d programs, %d mismatches", ran, mismatches)
	if ran != n {
		msg += fmt.Sprintf(" (%d of %d did not run)", n-ran, n)
	}
	t.Log(msg)
	fmt.Println(msg)
}

func assembleSample(t *testing.T, mod string) {
	ptxas := testenv.Lookup("ptxas")
	if ptxas == "" {
		if testenv.InCI() {
			t.Fatal("ptxas not found")
		}
		return
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "m.ptx")
	os.WriteFile(p, []byte(mod), 0o644)
	if out, err := exec.Command(ptxas, "-arch=sm_90", p, "-o", filepath.Join(dir, "m.cubin")).CombinedOutput(); err != nil {
		t.Fatalf("ptxas rejected the difftest module: %v\n%s", err, out)
	}
}
