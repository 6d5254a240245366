package runtime

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpubpf/gpubpf/internal/testenv"
)

// counterProg adds 1 to key 0 of map "hits" each time it runs.
func counterProg(name, section string) *ebpf.ProgramSpec {
	return &ebpf.ProgramSpec{Name: name, SectionName: section, Type: ebpf.Kprobe, License: "GPL", Instructions: asm.Instructions{
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, 0).WithReference("hits"),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return(),
	}}
}

// A real process calling a function of its own a known number of times; the
// uprobe resolved by name ("exe") and by symbol provider must count them all.
func TestUprobeCountsRealCalls(t *testing.T) {
	testenv.Root(t)
	gcc := testenv.Tool(t, "gcc")
	dir := t.TempDir()
	src := filepath.Join(dir, "app.c")
	os.WriteFile(src, []byte(`
#include <stdio.h>
#include <unistd.h>
__attribute__((noinline)) int cudaLaunchKernel(int x) { return x + 1; }
int main(void) {
	char b[8];
	if (read(0, b, 1) != 1) return 2;   /* wait until the probe is attached */
	int s = 0;
	for (int i = 0; i < 25; i++) s += cudaLaunchKernel(i);
	printf("%d\n", s);
	return 0;
}`), 0o644)
	bin := filepath.Join(dir, "app")
	if out, err := exec.Command(gcc, "-O1", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	for _, section := range []string{"uprobe/exe:cudaLaunchKernel", "uprobe/libcudart.so:cudaLaunchKernel"} {
		t.Run(section, func(t *testing.T) {
			spec := &ebpf.CollectionSpec{
				Maps:     map[string]*ebpf.MapSpec{"hits": {Name: "hits", Type: MapTypeKernelShared, KeySize: 4, ValueSize: 8, MaxEntries: 1}},
				Programs: map[string]*ebpf.ProgramSpec{"p": counterProg("p", section)},
			}
			gpu, cpu, err := SplitPrograms(spec)
			if err != nil {
				t.Fatal(err)
			}
			k, err := loadKernelSide(spec, gpu, cpu)
			if err != nil {
				t.Fatal(err)
			}
			defer k.Close()
			cmd := exec.Command(bin)
			stdin, _ := cmd.StdinPipe()
			var out strings.Builder
			cmd.Stdout = &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond) // let the dynamic linker map everything
			links, err := k.attachUprobes(cpu, cmd.Process.Pid)
			if err != nil {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatal(err)
			}
			defer func() {
				for _, l := range links {
					l.Close()
				}
			}()
			stdin.Write([]byte("g"))
			if err := cmd.Wait(); err != nil {
				t.Fatal(err)
			}
			var n uint64
			if err := k.coll.Maps["hits"].Lookup(uint32(0), &n); err != nil {
				t.Fatal(err)
			}
			if n != 25 || strings.TrimSpace(out.String()) != "325" {
				t.Fatalf("uprobe counted %d calls (want 25); app printed %q", n, out.String())
			}
		})
	}
}

func TestResolveUprobeTargetErrors(t *testing.T) {
	c := CPUProgram{Spec: &ebpf.ProgramSpec{Name: "p", SectionName: "uprobe"}}
	if _, err := resolveUprobeTarget(c, os.Getpid()); err == nil || !strings.Contains(err.Error(), "names no symbol") {
		t.Errorf("bare uprobe: %v", err)
	}
	c = CPUProgram{Spec: &ebpf.ProgramSpec{Name: "p"}, Path: "libcudart.so", Symbol: "cudaMalloc"}
	if _, err := resolveUprobeTarget(c, 0); err == nil || !strings.Contains(err.Error(), "ABSOLUTE_PATH") {
		t.Errorf("relative path in all-process mode: %v", err)
	}
	c.Symbol = "no_such_symbol_anywhere"
	if _, err := resolveUprobeTarget(c, os.Getpid()); err == nil || !strings.Contains(err.Error(), "defines no_such_symbol_anywhere") {
		t.Errorf("missing symbol: %v", err)
	}
}
