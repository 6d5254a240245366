package symbolize

import (
	"debug/elf"
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// StubHandle is the static in which a CUDA 12.x/13 host stub keeps its
// kernel's handle (nvcc emits `static cudaKernel_t __handle` inside
// __device_stub__<mangled kernel>): the runtime launch passes that handle,
// not the stub's address.
type StubHandle struct {
	Vaddr  uint64 // the static's ELF virtual address
	Kernel string // the kernel's mangled name
}

// StubHandles lists the kernel-handle statics of nvcc's host stubs in the
// object's symbol table (none when the object is stripped).
func (o *Object) StubHandles() []StubHandle { return o.stubs }

// stubHandle recognises the symbol of a host stub's handle static.
func stubHandle(s elf.Symbol) (StubHandle, bool) {
	if s.Value == 0 || !strings.HasSuffix(s.Name, "E8__handle") || !strings.Contains(s.Name, "__device_stub__") {
		return StubHandle{}, false
	}
	k := stubKernel(s.Name)
	return StubHandle{Vaddr: s.Value, Kernel: k}, k != ""
}

// stubKernel returns the kernel's mangled name from the symbol of a stub's
// static, e.g. _ZZ35__device_stub__Z9vectorAddPKfS0_PfiPKfS0_PfiE8__handle
// ("__device_stub__Z9vectorAddPKfS0_Pfi(float const*, ...)::__handle") ->
// _Z9vectorAddPKfS0_Pfi. Kernels with C linkage keep their plain name.
func stubKernel(sym string) string {
	d, err := demangle.ToString(sym, demangle.NoClones)
	if err != nil {
		return ""
	}
	const stub = "__device_stub__"
	i := strings.Index(d, stub)
	if i < 0 {
		return ""
	}
	k := d[i+len(stub):]
	if j := strings.IndexAny(k, "(<"); j >= 0 {
		k = k[:j]
	}
	switch {
	case k == "":
		return ""
	case k[0] == 'Z':
		return "_" + k
	default:
		return k
	}
}

// LoadBias returns runtime address minus ELF virtual address for an object
// mapped at start from file offset off. Mappings start on page boundaries,
// segments need not: a segment counts from the page it starts in.
func (o *Object) LoadBias(start, off uint64) (uint64, bool) {
	const page = 4096
	for _, p := range o.progs {
		if off >= p.Off&^(page-1) && off < p.Off+p.Filesz {
			return start - (off + p.Vaddr - p.Off), true
		}
	}
	return 0, false
}
