package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// internalWords must never reach a user: Go identifiers and type names of
// the implementation, and the marks of a bad format string.
var internalWords = []string{"Options.", "*ebpf.", "ebpf.", "runtime.", "gpumap.", "jit.", "agentproto.", "agentclient.",
	"MapType(", "Kind(", "%!", "<nil>", "(MISSING)"}

// Every error a user can reach with gpubpf run and gpubpf ptx on a machine
// without a GPU, from the real binary: one line on stderr, exit status 1 (2
// for usage errors), naming what the user gave (file, program, section,
// flag), saying what to do next, with no internal identifier, and, for
// errors found before tracing starts, no start banner.
func TestErrorMessages(t *testing.T) {
	tool := gpubpfTool(t)
	dir := t.TempDir()
	notELF := filepath.Join(dir, "notes.txt")
	os.WriteFile(notELF, []byte("not an object\n"), 0o644)
	app := cProgram(t, "app", callsTarget)
	var (
		gpu      = bpfObject(t, "WITH_GPU")
		none     = bpfObject(t)
		bare     = bpfObject(t, "WITH_BARE")
		bareNamd = bpfObject(t, "WITH_BARE", "WITH_NAMED")
		tracept  = bpfObject(t, "WITH_TRACEPOINT")
		badUp    = bpfObject(t, "WITH_BAD_UPROBE")
		lru      = bpfObject(t, "WITH_LRU")
		percpu   = bpfObject(t, "WITH_PERCPU")
		hostMap  = bpfObject(t, "WITH_HOST_MAP")
		hostCPU  = bpfObject(t, "WITH_HOST_MAP_ON_CPU")
		memRet   = bpfObject(t, "WITH_MEM_RETURN")
		memEmpty = bpfObject(t, "WITH_MEM_EMPTY")
	)
	directObj, _ := filepath.Abs("../../bpf/examples/direct_run_bpfel.o")
	badJSON := filepath.Join(dir, "bad.json")
	os.WriteFile(badJSON, []byte("{\"vec_N\": [1,\n  x]}\n"), 0o644)
	unknownJSON := filepath.Join(dir, "unknown.json")
	os.WriteFile(unknownJSON, []byte(`{"vec_X": [1]}`), 0o644)
	base := filepath.Base
	// The binary without the agent library next to it.
	lone := filepath.Join(t.TempDir(), "gpubpf")
	if b, err := os.ReadFile(tool); err != nil || os.WriteFile(lone, b, 0o755) != nil {
		t.Fatal("copying the tool")
	}
	for _, tc := range []struct {
		name  string
		args  []string
		usage bool     // exit status 2
		root  bool     // loads CPU programs into the kernel first
		says  []string // the user's input, then the next step
	}{
		{"run: no agent library", []string{"lone", "run", gpu, "--", app}, false, false,
			[]string{"agent library libgpubpf-agent.so was not found", "make agent"}},
		{"run: no object", []string{"run"}, true, false, []string{"run needs a BPF object", "gpubpf run PROG.bpf.o"}},
		{"run: no such file", []string{"run", "/nonexistent/prog.bpf.o", "--", app}, false, false,
			[]string{"/nonexistent/prog.bpf.o: no such file", "clang -O2 -g -target bpf"}},
		{"run: a directory", []string{"run", dir, "--", app}, false, false, []string{dir + " is a directory", "give the .o file"}},
		{"run: not an ELF file", []string{"run", notELF, "--", app}, false, false, []string{notELF + " is not an ELF file", "clang -O2 -g -target bpf"}},
		{"run: an ELF that is not BPF", []string{"run", app, "--", app}, false, false, []string{app + " is not a BPF object", "clang -O2 -g -target bpf"}},
		{"run: no programs", []string{"run", none, "--", app}, false, false, []string{base(none), "has no programs", `SEC("kprobe/KERNEL")`}},
		{"run: unknown section", []string{"run", tracept, "--", app}, false, false,
			[]string{base(tracept), `program on_write (section "tracepoint/syscalls/sys_enter_write")`, "put it in one of those sections"}},
		{"run: uprobe section without PATH:SYMBOL", []string{"run", badUp, "--", app}, false, false,
			[]string{base(badUp), `program bad_uprobe (section "uprobe/target_fn")`, `SEC("uprobe/PATH:SYMBOL")`, "--attach bad_uprobe=SYMBOL"}},
		{"run: bare uprobes without --attach", []string{"run", bare, "--", app}, false, false,
			[]string{base(bare), `enter (section "uprobe")`, `leave (section "uretprobe")`, `SEC("uprobe/libcudart.so:cudaLaunchKernel")`, "--attach NAME=SYMBOL[@PATH]"}},
		{"run: --attach without =", []string{"run", "--attach", "target_fn", bare, "--", app}, true, false,
			[]string{"--attach target_fn", "want PROG=SYMBOL or PROG=SYMBOL@PATH"}},
		{"run: --attach without a symbol", []string{"run", "--attach", "enter=", bare, "--", app}, true, false,
			[]string{"--attach enter=", "want PROG=SYMBOL"}},
		{"run: --attach twice for one program", []string{"run", "--attach", "enter=f", "--attach", "enter=g", bare, "--", app}, true, false,
			[]string{"--attach enter=g", "named twice"}},
		{"run: --attach for an unknown program", []string{"run", "--attach", "enter=target_fn", "--attach", "leave=target_fn", "--attach", "nope=f", bare, "--", app}, false, false,
			[]string{base(bare), "--attach nope=f", "no program nope", "its bare uprobe programs are enter, leave"}},
		{"run: --attach for a uprobe with its target", []string{"run", "--attach", "enter=target_fn", "--attach", "leave=target_fn", "--attach", "named=f", bareNamd, "--", app}, false, false,
			[]string{"--attach named=f", `program named (section "uprobe/exe:target_fn")`, "names its function already", `bare SEC("uprobe")`}},
		{"run: --attach for a GPU program", []string{"run", "--attach", "vecadd_entry=f", gpu, "--", app}, false, false,
			[]string{"--attach vecadd_entry=f", `(section "kprobe/_Z6vecAddPfi") is not a uprobe`, `bare SEC("uprobe")`}},
		{"run: --attach to a function the program lacks", []string{"run", "--attach", "enter=no_such_fn", "--attach", "leave=target_fn", bare, "--", app}, false, true,
			[]string{"program enter (--attach enter=no_such_fn)", app + " defines no function no_such_fn", "nm " + app}},
		{"run: --attach to a missing file", []string{"run", "--attach", "enter=f@/nonexistent/libx.so", "--attach", "leave=target_fn", bare, "--", app}, false, true,
			[]string{"--attach enter=f@/nonexistent/libx.so", "/nonexistent/libx.so does not exist", "give the path"}},
		{"run: --attach by library name, every process", []string{"run", "--attach", "enter=f@libcudart.so", "--attach", "leave=g@/usr/lib/x.so", bare}, false, true,
			[]string{"--attach enter=f@libcudart.so", "needs an absolute path", "-p PID or -- CMD"}},
		{"run: LRU hash on the GPU", []string{"run", lru, "--", app}, false, false,
			[]string{base(lru), `GPU program lru_entry (section "kprobe/_Z6vecAddPfi")`, "map recent is an LRU hash", "use BPF_MAP_TYPE_HASH"}},
		{"run: per-CPU array on the GPU", []string{"run", percpu, "--", app}, false, false,
			[]string{base(percpu), `GPU program percpu_entry (section "kprobe/_Z6vecAddPfi")`, "map percpu is a per-CPU array", "use BPF_MAP_TYPE_ARRAY"}},
		{"run: host-backed map over the pinned-memory budget", []string{"run", "--threads", "4194304", hostMap, "--", app}, false, false,
			[]string{base(hostMap), "the host-backed maps need 2048 MiB of pinned host memory", "perthread_counter: 4194304 threads",
				"over the 1024 MiB", "--threads", "BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP (1502)"}},
		{"run: host-backed map shared with a CPU program", []string{"run", hostCPU, "--", app}, false, true,
			[]string{base(hostCPU), "map shared_counter is a GPU-only map (type 1513) but CPU program cpu_side uses it", "BPF_MAP_TYPE_ARRAY or type 1504"}},
		{"run: --program unknown", []string{"run", "--program", "nope", gpu, "--", app}, true, false,
			[]string{base(gpu), "--program nope", "its programs are vecadd_entry"}},
		{"run: missing command", []string{"run", gpu, "--", "/nonexistent/cmd"}, false, false,
			[]string{"cannot run /nonexistent/cmd", "check the command's name, or give its path"}},
		{"run: command not on PATH", []string{"run", gpu, "--", "no-such-command-anywhere"}, false, false,
			[]string{"cannot run no-such-command-anywhere", "give its path"}},
		{"run: no such PID", []string{"run", "-p", "999999", gpu}, false, false, []string{"no process 999999", "check the PID"}},
		{"run: -p and a command", []string{"run", "-p", "1", gpu, "--", app}, true, false, []string{"either -p PID or -- CMD"}},
		{"run: -- and nothing", []string{"run", gpu, "--"}, true, false, []string{"no command after --", "gpubpf run " + gpu + " -- CMD"}},
		{"run: words after the object", []string{"run", gpu, app}, true, false, []string{`unexpected "` + app + `"`, "the command after --"}},
		{"run: --ring-mb not a power of two", []string{"run", "--ring-mb", "3", gpu, "--", app}, true, false, []string{"--ring-mb 3", "want a power of two"}},
		{"run: negative -d", []string{"run", "-d", "-1", gpu, "--", app}, true, false, []string{"--duration -1", "want a positive number"}},
		{"run: direct programs alone without --direct", []string{"run", directObj, "--", app}, false, false,
			[]string{base(directObj), "are all direct GPU programs", "gpubpf run --direct"}},
		{"run --direct: no direct programs", []string{"run", "--direct", gpu}, false, false,
			[]string{base(gpu), `--direct runs programs in SEC("gpu/direct") or SEC("kprobe/__directly_run")`, "vecadd_entry", "move a program to such a section"}},
		{"run --direct: --no-drop", []string{"run", "--direct", "--no-drop", directObj}, true, false,
			[]string{"--no-drop is for probes in an application", "size them with --ring-mb"}},
		{"run --direct: a command", []string{"run", "--direct", directObj, "--", app}, true, false,
			[]string{`drop "-- ` + app + `"`, "drop --direct to trace it"}},
		{"run --direct: -p", []string{"run", "--direct", "-p", "1", directObj}, true, false, []string{"--direct runs with no application: drop -p"}},
		{"run --direct: -k", []string{"run", "--direct", "-k", "vecAdd", directObj}, true, false, []string{"drop -k"}},
		{"run --direct: -i", []string{"run", "--direct", "-i", "1", directObj}, true, false, []string{"-i does not apply to --direct"}},
		{"run --direct: --attach", []string{"run", "--direct", "--attach", "p=f", directObj}, true, false, []string{"--attach places uprobes", "drop it"}},
		{"run: --grid without --direct", []string{"run", "--grid", "4", gpu, "--", app}, true, false,
			[]string{"--grid applies to direct runs only", "add --direct"}},
		{"run: --map without --direct", []string{"run", "--map", "vec_N=[1]", gpu, "--", app}, true, false,
			[]string{"--map applies to direct runs only", "add --direct"}},
		{"run --direct: bad --grid", []string{"run", "--direct", "--grid", "4,x", directObj}, true, false,
			[]string{"--grid 4,x", "want X[,Y[,Z]], positive integers"}},
		{"run --direct: --grid of four numbers", []string{"run", "--direct", "--grid", "1,1,1,1", directObj}, true, false,
			[]string{"--grid 1,1,1,1", "want X[,Y[,Z]]"}},
		{"run --direct: --block too big", []string{"run", "--direct", "--block", "64,64", directObj}, true, false,
			[]string{"--block 64,64", "at most 1024 threads", "this is 4096"}},
		{"run --direct: --grid too big in y", []string{"run", "--direct", "--grid", "1,70000", directObj}, true, false,
			[]string{"--grid 1,70000", "65535 in y and z"}},
		{"run --direct: --threads and --grid", []string{"run", "--direct", "--threads", "100", "--grid", "4", directObj}, true, false,
			[]string{"give --threads 100 or --grid 4, not both"}},
		{"run --direct: --threads with a 2-D block", []string{"run", "--direct", "--threads", "100", "--block", "16,16", directObj}, true, false,
			[]string{"--threads 100 makes a 1-D grid", "give a 1-D --block X"}},
		{"run --direct: --map without =", []string{"run", "--direct", "--map", "vec_N", directObj}, true, false,
			[]string{"--map vec_N", "want NAME=JSON", "--map 'vec_N=[1048576]'"}},
		{"run --direct: --map of an unknown map", []string{"run", "--direct", "--map", "vec_X=[1]", directObj}, false, false,
			[]string{"--map vec_X", "no map vec_X", "the ones to fill are gemm_A, gemm_B, gemm_C, gemm_dims, vec_A, vec_B, vec_C, vec_N"}},
		{"run --direct: --map of a map the program does not use", []string{"run", "--direct", "--program", "gemm", "--map", "vec_N=[1]", directObj}, false, false,
			[]string{"--map vec_N", "no map vec_N", "the ones to fill are gemm_A, gemm_B, gemm_C, gemm_dims"}},
		{"run --direct: --map value out of range", []string{"run", "--direct", "--map", "vec_N=[4294967296]", directObj}, false, false,
			[]string{"--map vec_N: map vec_N key 0", "value 4294967296 is out of range for 4-byte values", "give one from -2147483648 to 4294967295"}},
		{"run --direct: --map key past max_entries", []string{"run", "--direct", "--map", `vec_N={"1": 5}`, directObj}, false, false,
			[]string{`--map vec_N: map vec_N key "1"`, "the map has 1 entries (keys 0 to 0)", "use a key below 1"}},
		{"run --direct: --map with too many values", []string{"run", "--direct", "--map", "gemm_dims=[[1,2,3],[4,5,6]]", directObj}, false, false,
			[]string{"--map gemm_dims: map gemm_dims has 1 entries, and the array gives 2 values", "give at most 1"}},
		{"run --direct: --map value that does not split", []string{"run", "--direct", "--map", "gemm_dims=[[1,2]]", directObj}, false, false,
			[]string{"--map gemm_dims: map gemm_dims key 0", "2 numbers do not split a 12-byte value", "give 3, 6 or 12 numbers"}},
		{"run --direct: --map bad JSON", []string{"run", "--direct", "--map", "vec_N=[1,", directObj}, false, false,
			[]string{"--map vec_N: bad JSON", "write values as JSON"}},
		{"run --direct: --map-file missing", []string{"run", "--direct", "--map-file", "/nonexistent/ab.json", directObj}, false, false,
			[]string{"--map-file /nonexistent/ab.json", "no such file", "give a JSON file of map names and values"}},
		{"run --direct: --map-file bad JSON", []string{"run", "--direct", "--map-file", badJSON, directObj}, false, false,
			[]string{badJSON + ": bad JSON at line 2, column 3", "write values as JSON"}},
		{"run --direct: --map-file of an unknown map", []string{"run", "--direct", "--map-file", unknownJSON, directObj}, false, false,
			[]string{unknownJSON + ": no map vec_X", "the ones to fill are"}},
		{"run --direct: --dump into a missing directory", []string{"run", "--direct", "--dump", "/nonexistent/out.json", directObj}, false, false,
			[]string{"--dump /nonexistent/out.json", "directory /nonexistent does not exist", "give a file in an existing directory"}},
		{"run --direct: --program unknown", []string{"run", "--direct", "--program", "nope", directObj}, true, false,
			[]string{base(directObj), "--program nope", "its programs are gemm, hello, vec_add"}},
		{"run --direct: no libcuda (a machine without a GPU)", []string{"run", "--direct", "--threads", "1024", directObj}, false, false,
			[]string{"--direct needs a GPU", "cannot load the CUDA driver library libcuda.so.1", "--direct runs on a machine with an NVIDIA GPU and its driver installed"}},
		{"ptx: no object", []string{"ptx"}, true, false, []string{"gpubpf ptx needs one BPF object", "gpubpf ptx PROG.bpf.o"}},
		{"ptx: no such file", []string{"ptx", "/nonexistent/prog.bpf.o"}, false, false, []string{"/nonexistent/prog.bpf.o: no such file", "clang"}},
		{"ptx: not an ELF file", []string{"ptx", notELF}, false, false, []string{notELF + " is not an ELF file", "clang"}},
		{"ptx: no GPU programs", []string{"ptx", bare}, false, false, []string{base(bare), "has no GPU programs", `SEC("kprobe/KERNEL")`}},
		{"ptx: unknown GPU program", []string{"ptx", "--program", "nope", gpu}, false, false,
			[]string{"--program nope", base(gpu), "its GPU programs are vecadd_entry"}},
		{"ptx: unknown section", []string{"ptx", tracept}, false, false, []string{`section "tracepoint/syscalls/sys_enter_write"`, "put it in one of those sections"}},
		{"run: memory probe as a return probe", []string{"run", memRet, "--", app}, false, false,
			[]string{`program mem_ret (section "kretprobe/__memcapture")`, `put it in SEC("kprobe/__memcapture")`}},
		{"ptx: memory probe naming no kernel", []string{"ptx", memEmpty}, false, false,
			[]string{`program mem_none (section "gpu/mem/")`, `SEC("gpu/mem/*")`}},
		{"ptx: LRU hash", []string{"ptx", lru}, false, false, []string{"map recent is an LRU hash", "use BPF_MAP_TYPE_HASH"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root && os.Geteuid() != 0 {
				t.Skip("loads CPU programs into the kernel: needs root")
			}
			if strings.Contains(tc.name, "no libcuda") && hasLibcuda() {
				t.Skip("this machine has the CUDA driver library")
			}
			bin, args := tool, tc.args
			if args[0] == "lone" {
				if _, err := os.Stat("../../pkg/runtime/agentlib/embedded/libgpubpf-agent.so"); err == nil {
					t.Skip("the tool embeds an agent library (make embed-agent put one in pkg/runtime/agentlib/embedded)")
				}
				for _, d := range []string{"/usr/local/lib/gpubpf", "/usr/lib/gpubpf"} {
					if _, err := os.Stat(d); err == nil {
						t.Skip("an agent library is installed in " + d)
					}
				}
				bin, args = lone, args[1:]
			}
			cmd := exec.Command(bin, args...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			want := 1
			if tc.usage {
				want = 2
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != want {
				t.Fatalf("exit %v, want status %d\nstderr: %s", err, want, stderr.String())
			}
			msg := stderr.String()
			if !strings.HasPrefix(msg, "gpubpf: ") || strings.Count(msg, "\n") != 1 {
				t.Errorf("want one line starting with \"gpubpf: \", got:\n%s", msg)
			}
			for _, s := range tc.says {
				if !strings.Contains(msg, s) {
					t.Errorf("message does not say %q:\n%s", s, msg)
				}
			}
			for _, w := range internalWords {
				if strings.Contains(msg, w) {
					t.Errorf("message names an internal identifier (%q):\n%s", w, msg)
				}
			}
			if stdout.Len() > 0 {
				t.Errorf("stdout is not empty:\n%s", stdout.String())
			}
		})
	}
}

// hasLibcuda reports whether the dynamic loader would find libcuda.so.1.
func hasLibcuda() bool {
	out, _ := exec.Command("ldconfig", "-p").Output()
	_, err := os.Stat("/dev/nvidiactl")
	return strings.Contains(string(out), "libcuda.so.1") || err == nil
}
