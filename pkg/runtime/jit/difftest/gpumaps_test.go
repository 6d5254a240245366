package difftest

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
	"github.com/gpubpf/gpubpf/pkg/runtime/jit"
)

const (
	mapsGrid  = 64
	mapsBlock = 128
	mapsTotal = mapsGrid * mapsBlock
)

// gtid leaves blockIdx.x*blockDim.x+threadIdx.x in r6 (helpers 503-505).
func gtid() asm.Instructions {
	var is asm.Instructions
	for k, id := range []asm.BuiltinFunc{503, 504, 505} {
		o := int16(-24 * (k + 1))
		is = append(is,
			asm.Mov.Reg(asm.R1, asm.RFP), asm.Add.Imm(asm.R1, int32(o)),
			asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, int32(o+8)),
			asm.Mov.Reg(asm.R3, asm.RFP), asm.Add.Imm(asm.R3, int32(o+16)),
			id.Call())
	}
	return append(is,
		asm.LoadMem(asm.R6, asm.RFP, -24, asm.DWord),
		asm.LoadMem(asm.R7, asm.RFP, -48, asm.DWord),
		asm.Mul.Reg(asm.R6, asm.R7),
		asm.LoadMem(asm.R7, asm.RFP, -72, asm.DWord),
		asm.Add.Reg(asm.R6, asm.R7),
	)
}

// firstWords is the first four u64 of an array map's value 0.
func firstWords(mem []byte, p gpumap.Placement) ([4]uint64, error) {
	var got [4]uint64
	v, err := gpumap.ArrayValue(mem, p.ValueSize, 0, false)
	if err != nil {
		return got, err
	}
	for i := range got {
		got[i] = binary.LittleEndian.Uint64(v[8*i:])
	}
	return got, nil
}

type mapsCase struct {
	name  string
	p     gpumap.Placement
	insns asm.Instructions
	check func(mem []byte, p gpumap.Placement) error
}

func mapsCases() []mapsCase {
	key0 := asm.Instructions{asm.Instruction{OpCode: asm.StoreImmOp(asm.DWord), Dst: asm.RFP, Offset: -80, Constant: 0}, asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -80)}
	return []mapsCase{
		{
			// Per-thread array with half as many slots as threads.
			name: "pta",
			p:    gpumap.Placement{Kind: gpumap.PerThreadArray, KeySize: 4, ValueSize: 8, MaxEntries: 1, Threads: mapsTotal / 2},
			insns: cat(gtid(), asm.Instructions{asm.LoadMapPtr(asm.R1, 0).WithReference("m")}, key0, asm.Instructions{
				asm.FnMapLookupElem.Call(),
				jOff(asm.JEq.Imm(asm.R0, 0, ""), 2),
				asm.Add.Imm(asm.R6, 1),
				asm.StoreMem(asm.R0, 0, asm.R6, asm.DWord),
				asm.Mov.Imm(asm.R0, 0), asm.Return(),
			}),
			check: func(mem []byte, p gpumap.Placement) error {
				h, err := gpumap.ReadHeader(mem)
				if err != nil {
					return err
				}
				if h.Errors != mapsTotal/2 {
					return fmt.Errorf("out-of-range thread counter = %d, want %d", h.Errors, mapsTotal/2)
				}
				for t := uint32(0); t < mapsTotal/2; t++ {
					v, err := gpumap.PerThreadValue(mem, p, t, 0)
					if err != nil {
						return err
					}
					if got := binary.LittleEndian.Uint64(v); got != uint64(t)+1 {
						return fmt.Errorf("thread %d slot = %d, want %d", t, got, t+1)
					}
				}
				return nil
			},
		},
		{
			// bpf_gpu_atomic_max (608) from 8192 threads on one array
			// value {max id, 100 from all, first-seen count, sum}: in
			// global memory and on each thread's stack, old values back.
			name: "atomic-max",
			p:    gpumap.Placement{Kind: gpumap.Array, KeySize: 4, ValueSize: 32, MaxEntries: 1},
			insns: cat(gtid(), asm.Instructions{asm.LoadMapPtr(asm.R1, 0).WithReference("m")}, key0, asm.Instructions{
				asm.FnMapLookupElem.Call(),
				jOff(asm.JNE.Imm(asm.R0, 0, ""), 2),
				asm.Mov.Imm(asm.R0, 0), asm.Return(),
				asm.Mov.Reg(asm.R7, asm.R0),
				asm.Mov.Reg(asm.R1, asm.R7), asm.Mov.Reg(asm.R2, asm.R6), asm.BuiltinFunc(608).Call(),
				asm.Mov.Reg(asm.R1, asm.R7), asm.Add.Imm(asm.R1, 8), asm.Mov.Imm(asm.R2, 100), asm.BuiltinFunc(608).Call(),
				jOff(asm.JNE.Imm(asm.R0, 0, ""), 2),
				asm.Mov.Imm(asm.R1, 1),
				asm.AddAtomic.Mem(asm.R7, asm.R1, asm.DWord, 16), // the one thread that saw 0
				asm.Instruction{OpCode: asm.StoreImmOp(asm.DWord), Dst: asm.RFP, Offset: -88, Constant: 5},
				asm.Mov.Reg(asm.R1, asm.RFP), asm.Add.Imm(asm.R1, -88), asm.Mov.Reg(asm.R2, asm.R6), asm.And.Imm(asm.R2, 3), asm.BuiltinFunc(608).Call(),
				asm.Mov.Reg(asm.R1, asm.RFP), asm.Add.Imm(asm.R1, -88), asm.Mov.Imm(asm.R2, 9), asm.BuiltinFunc(608).Call(),
				asm.LoadMem(asm.R8, asm.RFP, -88, asm.DWord),
				asm.Add.Reg(asm.R8, asm.R0), // 9 + 5
				asm.AddAtomic.Mem(asm.R7, asm.R8, asm.DWord, 24),
				asm.Mov.Imm(asm.R0, 0), asm.Return(),
			}),
			check: func(mem []byte, p gpumap.Placement) error {
				got, err := firstWords(mem, p)
				if err != nil {
					return err
				}
				if want := [4]uint64{mapsTotal - 1, 100, 1, 14 * mapsTotal}; got != want {
					return fmt.Errorf("{max id, 100, first-seen, stack sum} = %v, want %v", got, want)
				}
				return nil
			},
		},
		{
			// The first-thread test (bpf_gpu_thread_id() compared with 0
			// right after the call compiles to a test of the index
			// registers): {threads past "!= 0", threads past "== 0",
			// max id, sum of ids} where the id is used after both tests.
			name: "first-thread",
			p:    gpumap.Placement{Kind: gpumap.Array, KeySize: 4, ValueSize: 32, MaxEntries: 1},
			insns: cat(asm.Instructions{asm.LoadMapPtr(asm.R1, 0).WithReference("m")}, key0, asm.Instructions{
				asm.FnMapLookupElem.Call(),
				jOff(asm.JNE.Imm(asm.R0, 0, ""), 2),
				asm.Mov.Imm(asm.R0, 0), asm.Return(),
				asm.Mov.Reg(asm.R7, asm.R0),
				asm.Mov.Imm(asm.R8, 1),
				asm.BuiltinFunc(606).Call(),
				jOff(asm.JNE.Imm(asm.R0, 0, ""), 1),
				asm.AddAtomic.Mem(asm.R7, asm.R8, asm.DWord, 0), // thread 0 only
				asm.BuiltinFunc(606).Call(),
				jOff(asm.JEq.Imm(asm.R0, 0, ""), 1),
				asm.AddAtomic.Mem(asm.R7, asm.R8, asm.DWord, 8), // all but thread 0
				asm.Mov.Reg(asm.R6, asm.R0),                     // the id, used after the test
				asm.Mov.Reg(asm.R1, asm.R7), asm.Add.Imm(asm.R1, 16), asm.Mov.Reg(asm.R2, asm.R6), asm.BuiltinFunc(608).Call(),
				asm.AddAtomic.Mem(asm.R7, asm.R6, asm.DWord, 24),
				asm.Mov.Imm(asm.R0, 0), asm.Return(),
			}),
			check: func(mem []byte, p gpumap.Placement) error {
				got, err := firstWords(mem, p)
				if err != nil {
					return err
				}
				if want := [4]uint64{1, mapsTotal - 1, mapsTotal - 1, mapsTotal * (mapsTotal - 1) / 2}; got != want {
					return fmt.Errorf("{first threads, other threads, max id, sum of ids} = %v, want %v", got, want)
				}
				return nil
			},
		},
		{
			// 8192 threads insert 64 keys concurrently; then 16 of them are deleted.
			name: "hash",
			p:    gpumap.Placement{Kind: gpumap.Hash, KeySize: 8, ValueSize: 8, MaxEntries: 64},
			insns: cat(gtid(), asm.Instructions{
				asm.Mov.Reg(asm.R7, asm.R6), asm.And.Imm(asm.R7, 63),
				asm.StoreMem(asm.RFP, -80, asm.R7, asm.DWord),
				asm.Mov.Reg(asm.R8, asm.R7), asm.Mul.Imm(asm.R8, 3),
				asm.StoreMem(asm.RFP, -88, asm.R8, asm.DWord),
				asm.LoadMapPtr(asm.R1, 0).WithReference("m"),
				asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -80),
				asm.Mov.Reg(asm.R3, asm.RFP), asm.Add.Imm(asm.R3, -88),
				asm.Mov.Imm(asm.R4, 0),
				asm.FnMapUpdateElem.Call(),
				jOff(asm.JGE.Imm(asm.R7, 16, ""), 5),
				asm.LoadMapPtr(asm.R1, 0).WithReference("m"),
				asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -80),
				asm.FnMapDeleteElem.Call(),
				asm.Mov.Imm(asm.R0, 0), asm.Return(),
			}),
			check: func(mem []byte, p gpumap.Placement) error {
				h, err := gpumap.ReadHeader(mem)
				if err != nil {
					return err
				}
				n := 0
				var bad []string
				gpumap.HashEntries(mem, p, func(k, v []byte) bool {
					n++
					key, val := binary.LittleEndian.Uint64(k), binary.LittleEndian.Uint64(v)
					if key < 16 || key >= 64 || val != key*3 {
						bad = append(bad, fmt.Sprintf("%d=%d", key, val))
					}
					return true
				})
				// Deletes race with inserts of the same key (threads of
				// other warps), so keys 0-15 may or may not survive; keys
				// 16-63 must be there exactly once with the right value.
				for k := uint64(16); k < 64; k++ {
					v, ok := gpumap.HashLookup(mem, p, binary.LittleEndian.AppendUint64(nil, k))
					if !ok || binary.LittleEndian.Uint64(v) != k*3 {
						return fmt.Errorf("key %d missing or wrong", k)
					}
				}
				if uint64(n) != h.Count {
					return fmt.Errorf("%d valid slots but the live count says %d", n, h.Count)
				}
				if h.Errors != 0 {
					return fmt.Errorf("%d full-table errors on a table that never fills", h.Errors)
				}
				_ = bad
				return nil
			},
		},
		{
			// A table of 16 entries offered 32 keys: 16 fit, the rest are errors.
			name: "hash-full",
			p:    gpumap.Placement{Kind: gpumap.Hash, KeySize: 8, ValueSize: 8, MaxEntries: 16},
			insns: cat(gtid(), asm.Instructions{
				asm.Mov.Reg(asm.R7, asm.R6), asm.And.Imm(asm.R7, 31),
				asm.StoreMem(asm.RFP, -80, asm.R7, asm.DWord),
				asm.StoreMem(asm.RFP, -88, asm.R6, asm.DWord),
				asm.LoadMapPtr(asm.R1, 0).WithReference("m"),
				asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -80),
				asm.Mov.Reg(asm.R3, asm.RFP), asm.Add.Imm(asm.R3, -88),
				asm.Mov.Imm(asm.R4, 1),
				asm.FnMapUpdateElem.Call(),
				asm.Mov.Imm(asm.R0, 0), asm.Return(),
			}),
			check: func(mem []byte, p gpumap.Placement) error {
				h, err := gpumap.ReadHeader(mem)
				if err != nil {
					return err
				}
				n := 0
				keys := map[uint64]bool{}
				gpumap.HashEntries(mem, p, func(k, v []byte) bool {
					n++
					keys[binary.LittleEndian.Uint64(k)] = true
					return true
				})
				if n != 16 || len(keys) != 16 || h.Count != 16 {
					return fmt.Errorf("%d entries (%d distinct keys, count %d), want 16", n, len(keys), h.Count)
				}
				if h.Errors == 0 {
					return fmt.Errorf("no full-table errors counted")
				}
				return nil
			},
		},
		{
			// Every thread emits its id into a 64 KiB ring nobody drains:
			// records that fit arrive whole, the rest are counted drops.
			name:  "ring",
			p:     gpumap.Placement{Kind: gpumap.RingBuf, RingSize: 1 << 16},
			insns: emitID(),
			check: func(mem []byte, p gpumap.Placement) error {
				r, err := gpumap.NewReader(mem, gpumap.Snapshot)
				if err != nil {
					return err
				}
				seen := map[uint64]bool{}
				var bad error
				n, _ := r.Scan(r.Reserved(), func(rec []byte) {
					if len(rec) != 8 {
						bad = fmt.Errorf("record of %d bytes, want 8", len(rec))
						return
					}
					id := binary.LittleEndian.Uint64(rec)
					if id >= mapsTotal || seen[id] {
						bad = fmt.Errorf("torn or duplicate record %d", id)
					}
					seen[id] = true
				})
				if bad != nil {
					return bad
				}
				if n+r.Dropped() != mapsTotal || n != (1<<16)/16 || r.Produced() != mapsTotal {
					return fmt.Errorf("%d records + %d drops (%d produced), want %d records and %d in all", n, r.Dropped(), r.Produced(), (1<<16)/16, mapsTotal)
				}
				return nil
			},
		},
		{
			// The same in a ring of 8 shards (the warp key mod 8):
			// every record arrives once across the shards, each shard's
			// counters add up, and more than one shard was used.
			name:  "ring-sharded",
			p:     gpumap.Placement{Kind: gpumap.RingBuf, RingSize: 1 << 20, Shards: 8},
			insns: emitID(),
			check: func(mem []byte, p gpumap.Placement) error {
				rs, err := gpumap.NewReaders(mem, gpumap.Snapshot)
				if err != nil {
					return err
				}
				if len(rs) != 8 {
					return fmt.Errorf("%d shard readers, want 8", len(rs))
				}
				seen := map[uint64]bool{}
				var bad error
				var n, produced, dropped uint64
				used := 0
				for _, r := range rs {
					got, _ := r.Scan(r.Reserved(), func(rec []byte) {
						id := binary.LittleEndian.Uint64(rec)
						if len(rec) != 8 || id >= mapsTotal || seen[id] {
							bad = fmt.Errorf("torn, duplicate or wrong-size record (%d bytes, id %d)", len(rec), id)
						}
						seen[id] = true
					})
					if got > 0 {
						used++
					}
					if got+r.Dropped() != r.Produced() {
						bad = fmt.Errorf("a shard holds %d records + %d drops of %d produced", got, r.Dropped(), r.Produced())
					}
					n, produced, dropped = n+got, produced+r.Produced(), dropped+r.Dropped()
				}
				if bad != nil {
					return bad
				}
				if n+dropped != mapsTotal || produced != mapsTotal || used < 2 {
					return fmt.Errorf("%d records + %d drops (%d produced) in %d shards, want %d produced in more than one shard", n, dropped, produced, used, mapsTotal)
				}
				return nil
			},
		},
		{
			// Divergent warps with mixed record sizes (the shuffle-sum
			// path of the warp-aggregated reservation): threads with
			// id%3 != 0 emit 8*(1+id%4) bytes starting with their id.
			name: "ring-mixed",
			p:    gpumap.Placement{Kind: gpumap.RingBuf, RingSize: 1 << 20},
			insns: cat(gtid(), asm.Instructions{
				asm.Mov.Reg(asm.R7, asm.R6), asm.Mod.Imm(asm.R7, 3),
				asm.JEq.Imm(asm.R7, 0, "out"),
				asm.StoreMem(asm.RFP, -80, asm.R6, asm.DWord),
				asm.StoreMem(asm.RFP, -72, asm.R6, asm.DWord),
				asm.StoreMem(asm.RFP, -64, asm.R6, asm.DWord),
				asm.StoreMem(asm.RFP, -56, asm.R6, asm.DWord),
				asm.Mov.Reg(asm.R3, asm.R6), asm.And.Imm(asm.R3, 3), asm.Add.Imm(asm.R3, 1), asm.LSh.Imm(asm.R3, 3),
				asm.LoadMapPtr(asm.R1, 0).WithReference("m"),
				asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -80),
				asm.Mov.Imm(asm.R4, 0),
				asm.FnRingbufOutput.Call(),
				asm.Mov.Imm(asm.R0, 0).WithSymbol("out"), asm.Return(),
			}),
			check: func(mem []byte, p gpumap.Placement) error {
				r, err := gpumap.NewReader(mem, gpumap.Snapshot)
				if err != nil {
					return err
				}
				seen := map[uint64]bool{}
				var bad error
				n, _ := r.Scan(r.Reserved(), func(rec []byte) {
					id := binary.LittleEndian.Uint64(rec)
					if id >= mapsTotal || id%3 == 0 || seen[id] || len(rec) != int(8*(1+id%4)) {
						bad = fmt.Errorf("record of %d bytes for thread %d (torn, duplicate or wrong size)", len(rec), id)
					}
					for o := 8; o+8 <= len(rec); o += 8 {
						if binary.LittleEndian.Uint64(rec[o:]) != id {
							bad = fmt.Errorf("thread %d: word %d is %d", id, o/8, binary.LittleEndian.Uint64(rec[o:]))
						}
					}
					seen[id] = true
				})
				if bad != nil {
					return bad
				}
				want := uint64(mapsTotal - (mapsTotal+2)/3)
				if n != want || r.Dropped() != 0 || r.Produced() != want {
					return fmt.Errorf("%d records, %d dropped, %d produced; want %d, 0, %d", n, r.Dropped(), r.Produced(), want, want)
				}
				return nil
			},
		},
		{
			name: "printk",
			p:    gpumap.Placement{Kind: gpumap.RingBuf, RingSize: 1 << 20},
			insns: cat(gtid(), asm.Instructions{
				asm.LoadImm(asm.R1, int64(binary.LittleEndian.Uint64([]byte("tid %d\n\x00"))), asm.DWord),
				asm.StoreMem(asm.RFP, -80, asm.R1, asm.DWord),
				asm.Mov.Reg(asm.R1, asm.RFP), asm.Add.Imm(asm.R1, -80), asm.Mov.Imm(asm.R2, 8),
				asm.Mov.Reg(asm.R3, asm.R6),
				asm.FnTracePrintk.Call(),
				asm.Mov.Imm(asm.R0, 0), asm.Return(),
			}),
			check: func(mem []byte, p gpumap.Placement) error {
				r, err := gpumap.NewReader(mem, gpumap.Snapshot)
				if err != nil {
					return err
				}
				seen := map[string]bool{}
				var bad error
				r.Scan(r.Reserved(), func(rec []byte) {
					pr, err := gpumap.DecodePrintk(rec)
					if err != nil {
						bad = err
						return
					}
					seen[pr.String()] = true
				})
				if bad != nil {
					return bad
				}
				if len(seen) != mapsTotal || !seen["tid 4095\n"] {
					return fmt.Errorf("%d distinct printk lines, want %d (has tid 4095: %v)", len(seen), mapsTotal, seen["tid 4095\n"])
				}
				return nil
			},
		},
	}
}

func cat(parts ...asm.Instructions) asm.Instructions {
	var out asm.Instructions
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// emitID: every thread outputs its global id as an 8-byte record.
func emitID() asm.Instructions {
	return cat(gtid(), asm.Instructions{
		asm.StoreMem(asm.RFP, -80, asm.R6, asm.DWord),
		asm.LoadMapPtr(asm.R1, 0).WithReference("m"),
		asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -80),
		asm.Mov.Imm(asm.R3, 8), asm.Mov.Imm(asm.R4, 0),
		asm.FnRingbufOutput.Call(),
		asm.Mov.Imm(asm.R0, 0), asm.Return(),
	})
}

// TestGPUMaps runs multi-threaded map programs on the GPU (8192 threads
// each) and checks the maps with gpumap's host readers. Needs the harness.
func TestGPUMaps(t *testing.T) {
	cases := mapsCases()
	const regionSize = 2 << 20
	h := startHarness(t, uint64(len(cases)*regionSize))
	if h == nil {
		t.Skip("no GPU harness (GPUBPF_DIFFTEST_HARNESS); scripts/gpu/jit-difftest.sh runs this on the GPU machine")
	}
	var fns []*jit.Function
	var rets []uint64
	img := make([]byte, len(cases)*regionSize)
	for i, c := range cases {
		c.p.Addr = h.addr + uint64(i*regionSize)
		if gpumap.SizeOf(c.p) > regionSize-8 {
			t.Fatalf("%s: map too big", c.name)
		}
		cases[i].p = c.p
		copy(img[i*regionSize:], gpumap.Init(c.p))
		opts := jit.Options{Maps: map[string]gpumap.Placement{"m": c.p}, FuncName: "maps_" + strings.ReplaceAll(c.name, "-", "_")}
		if c.name == "printk" {
			opts.Printk = c.p
		}
		f, err := jit.Compile(&ebpf.ProgramSpec{Name: c.name, Instructions: c.insns}, opts)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		fns = append(fns, f)
		rets = append(rets, c.p.Addr+regionSize-8)
	}
	out, line, err := h.run(module(fns, rets), img, len(cases), mapsGrid, mapsBlock)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("harness: %s", line)
	for i, c := range cases {
		if err := c.check(out[i*regionSize:(i+1)*regionSize-8], c.p); err != nil {
			t.Errorf("%s: %v", c.name, err)
		} else {
			t.Logf("%s: ok", c.name)
		}
	}
	// The first-thread test reads ctaid.x alone first and the other five
	// index registers only where it is 0: a 3-D launch of as many threads
	// has blocks and threads that pass the first test and not the second.
	for i, c := range cases {
		if c.name != "first-thread" {
			continue
		}
		out, _, err := h.runDims(module(fns[i:i+1], rets[i:i+1]), img, 1, "4x4x4", "8x4x4")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.check(out[i*regionSize:(i+1)*regionSize-8], c.p); err != nil {
			t.Errorf("%s, grid 4x4x4 of 8x4x4 threads: %v", c.name, err)
		} else {
			t.Logf("%s, grid 4x4x4 of 8x4x4 threads: ok", c.name)
		}
	}
}
