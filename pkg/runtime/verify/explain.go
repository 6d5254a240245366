package verify

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpubpf/gpubpf/pkg/runtime/jit"
)

// insnLine is a verifier log line that shows an instruction: "12: (61) r1 = ...".
var insnLine = regexp.MustCompile(`^(\d+): \([0-9a-f]{2}\)`)

// insnInReason finds the instruction named by a reason that is not tied
// to the last instruction shown ("infinite loop detected at insn 12",
// "back-edge from insn 10 to 5", "unreachable insn 7").
var insnInReason = regexp.MustCompile(`insn (\d+)`)

// refusal turns the verifier's log into an Error on the program's own
// instruction and source line.
func (tw *twin) refusal(ve *ebpf.VerifierError) *Error {
	e := &Error{Program: tw.prog.Name, Section: tw.prog.SectionName, Insn: -1, Log: ve.Log, ByKernel: true}
	log := ve.Log
	for len(log) > 0 && (strings.HasPrefix(log[len(log)-1], "processed ") || strings.TrimSpace(log[len(log)-1]) == "") {
		log = log[:len(log)-1]
	}
	if len(log) == 0 {
		e.Reason = ve.Cause.Error()
	} else {
		e.Reason = strings.TrimSpace(log[len(log)-1])
		// "R1 type=scalar expected=fp" follows the line that says which
		// argument: keep both.
		if len(log) > 1 && strings.HasPrefix(log[len(log)-2], "R") && !insnLine.MatchString(log[len(log)-2]) {
			e.Reason = strings.TrimSpace(log[len(log)-2]) + "; " + e.Reason
		}
	}
	slot := -1
	if m := insnInReason.FindStringSubmatch(e.Reason); m != nil {
		slot, _ = strconv.Atoi(m[1])
	} else {
		for j := len(log) - 1; j >= 0; j-- {
			if m := insnLine.FindStringSubmatch(log[j]); m != nil {
				slot, _ = strconv.Atoi(m[1])
				break
			}
		}
	}
	if slot >= 0 && slot < len(tw.orig) {
		e.Insn = tw.orig[slot]
	}
	if tooLong.MatchString(e.Reason) {
		// The verifier stops wherever its budget ran out: name the loop
		// around that place instead.
		e.Insn = loopAround(tw.prog.Instructions, e.Insn)
	}
	if e.Insn >= 0 {
		e.Source = jit.SourceLine(tw.prog.Instructions, e.Insn)
	}
	e.Explain = explain(e.Reason)
	return e
}

// tooLong matches the verifier giving up on the number of paths or
// instructions, which a loop it cannot bound causes.
var tooLong = regexp.MustCompile(`too large|too complex|infinite loop`)

// loopAround returns the backward jump (the loop condition) of the
// innermost loop of insns that contains instruction i, the first loop's
// when none does, or i when there is no loop.
func loopAround(insns asm.Instructions, i int) int {
	at, raw := offsets(insns)
	best, span, first := -1, len(insns)+1, -1
	for k, ins := range insns {
		if !isJump(ins) {
			continue
		}
		t, ok := at[raw[k]+1+jumpOffset(ins)]
		if !ok || t > k {
			continue
		}
		if first < 0 {
			first = k
		}
		if t <= i && i <= k && k-t < span {
			best, span = k, k-t
		}
	}
	switch {
	case best >= 0:
		return best
	case first >= 0:
		return first
	}
	return i
}

// explanation says in plain words what a verifier message means for a GPU
// program and what to change.
type explanation struct {
	match *regexp.Regexp
	says  string
}

var explanations = []explanation{
	{regexp.MustCompile(`invalid mem access '(map_value_or_null|ptr_or_null_|.*_or_null)`),
		"it uses the result of a map lookup (or ring buffer reservation) without checking it for NULL; on the GPU that is an illegal address that kills the application's CUDA context. Check it first: if (!v) return 0;"},
	// With strict alignment a load through a number fails its alignment
	// check first: "misaligned access" has no kind before "access".
	{regexp.MustCompile(`invalid mem access '(scalar|inv)'|misaligned access off`),
		"it reads or writes memory through a number that is not a pointer the verifier knows (a device address taken from the kernel's arguments or a launch word); a bad address would kill the application's CUDA context. Read device memory with bpf_probe_read_kernel(&dst, sizeof(dst), ptr), which refuses NULL"},
	{regexp.MustCompile(`(math between fp pointer|variable-offset|variable stack access|invalid (indirect )?(read|write) (from|to) stack|invalid stack|stack (off|depth)|min value is negative)`),
		"it accesses its stack outside its frame, or at an index the verifier cannot bound; on the GPU that reads or overwrites another thread's memory. Bound the index before using it (if (i >= N) return 0;)"},
	{regexp.MustCompile(`(math between map_value pointer|invalid access to map value|outside of the allowed memory range|map_value.*(off|size)|invalid access to memory)`),
		"it accesses a map value (or ctx) outside its size, or at an offset the verifier cannot bound; check the index against the value's size first"},
	{regexp.MustCompile(`(infinite loop|back-edge|too large|too complex|loop)`),
		"it may run forever: the verifier cannot prove a loop ends, and a GPU thread that never finishes hangs the application's kernel. Give each loop a constant upper bound (for (i = 0; i < 64 && i < n; i++))"},
	{regexp.MustCompile(`R0 !read_ok|At program exit`),
		"it can return without setting a return value"},
	{regexp.MustCompile(`!read_ok`),
		"it reads a register before setting it (an uninitialised variable); initialise it"},
	{regexp.MustCompile(`misaligned`),
		"it accesses memory at an address not aligned to the access size, which faults on the GPU; align the field or copy it with __builtin_memcpy"},
	{regexp.MustCompile(`(type=\S+ expected=|expected=|arg#?\d|helper access|invalid indirect)`),
		"it passes a helper an argument of the wrong kind or size (e.g. a number where a pointer to the stack or to a map is expected)"},
	{regexp.MustCompile(`unreachable insn`),
		"it has instructions that can never run; rebuild the object with clang -O2"},
}

func explain(reason string) string {
	for _, x := range explanations {
		if x.match.MatchString(reason) {
			return x.says
		}
	}
	return "the kernel's verifier cannot prove it safe; the GPU runs only what it would run in the kernel. gpubpf verify -v OBJ prints the verifier's log"
}
