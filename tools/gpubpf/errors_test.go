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
		{"run: --program unknown", []string{"run", "--program", "nope", gpu, "--", app}, false, false,
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
