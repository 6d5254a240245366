package toolkit

import (
	"encoding/binary"
	"fmt"
)

// ThreadEvent is struct gpu_thread_event of bpf/gputhread.h: one GPU
// thread at a probe (kernel_trace, kernelretsnoop --events).
type ThreadEvent struct {
	TS                        uint64 // %globaltimer
	Grid                      uint64 // %gridid
	BlockX, BlockY, BlockZ    uint32
	ThreadX, ThreadY, ThreadZ uint32
	SM, Warp, Lane            uint32
	Kernel                    uint32 // bpf_gpu_kernel_index
}

// ThreadEventSize is sizeof(struct gpu_thread_event).
const ThreadEventSize = 56

// DecodeThreadEvent decodes one record.
func DecodeThreadEvent(b []byte) (ThreadEvent, error) {
	if len(b) < ThreadEventSize {
		return ThreadEvent{}, fmt.Errorf("GPU thread record of %d bytes, want %d", len(b), ThreadEventSize)
	}
	le := binary.LittleEndian
	u := func(i int) uint32 { return le.Uint32(b[16+4*i:]) }
	return ThreadEvent{TS: le.Uint64(b), Grid: le.Uint64(b[8:]),
		BlockX: u(0), BlockY: u(1), BlockZ: u(2), ThreadX: u(3), ThreadY: u(4), ThreadZ: u(5),
		SM: u(6), Warp: u(7), Lane: u(8), Kernel: u(9)}, nil
}

// LinLogBuckets is LINLOG_BUCKETS of bpf/gputhread.h.
const LinLogBuckets = 320

// LinLogValue is the value bucket b of linlog_bucket stands for: exact
// below 16, else the middle of the bucket (buckets are 1/8 of a power of
// two wide).
func LinLogValue(b int) uint64 {
	if b < 16 {
		return uint64(b)
	}
	e, m := (b-16)/8+4, uint64((b-16)%8)
	lo := (8 + m) << (e - 3)
	return lo + (uint64(1)<<(e-3))/2
}

// LinLogQuantile is the value at quantile q (0..1) of a log-linear bucket
// histogram, and the number of values counted.
func LinLogQuantile(h []uint64, q float64) (v uint64, n uint64) {
	for _, c := range h {
		n += c
	}
	if n == 0 {
		return 0, 0
	}
	rank := uint64(q*float64(n-1)) + 1
	var seen uint64
	for b, c := range h {
		seen += c
		if seen >= rank {
			return LinLogValue(b), n
		}
	}
	return LinLogValue(len(h) - 1), n
}
