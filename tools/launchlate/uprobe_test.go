package launchlate

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/gpubpf/gpubpf/internal/testenv"
)

// The CPU side on a real process: runtime launches (cudaLaunchKernel,
// which calls cuLaunchKernel inside, as cudart does) and graph launches are
// stamped, marked pending for the agent, and counted; driver calls are not
// probed (the agent stamps driver-API launches itself); the slot is keyed
// by the calling thread.
func TestUprobeStamps(t *testing.T) {
	testenv.Root(t)
	gcc := testenv.Tool(t, "gcc")
	dir := t.TempDir()
	src := filepath.Join(dir, "app.c")
	os.WriteFile(src, []byte(`
#define _GNU_SOURCE
#include <stdio.h>
#include <unistd.h>
#include <sys/syscall.h>
__attribute__((noinline)) int cuLaunchKernel(int x) { __asm__ volatile("" ::: "memory"); return x + 1; }
__attribute__((noinline)) int cudaLaunchKernel(int x) { return cuLaunchKernel(x) + 1; }
__attribute__((noinline)) int cuGraphLaunch(int x) { __asm__ volatile("" ::: "memory"); return x; }
__attribute__((noinline)) int cudaGraphLaunch(int x) { return cuGraphLaunch(x); }
int main(void) {
	char b[8];
	if (read(0, b, 1) != 1) return 2;
	int s = 0;
	for (int i = 0; i < 10; i++) s += cuLaunchKernel(i);   /* direct driver launches */
	for (int i = 0; i < 20; i++) s += cudaGraphLaunch(i);
	for (int i = 0; i < 30; i++) s += cudaLaunchKernel(i); /* runtime, nested driver */
	printf("%ld %d\n", (long)syscall(SYS_gettid), s);
	return 0;
}`), 0o644)
	bin := filepath.Join(dir, "app")
	if out, err := exec.Command(gcc, "-O1", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	spec, err := loadLaunchlate()
	if err != nil {
		t.Fatal(err)
	}
	// The kernel side only, with the shared map as the runtime loads it.
	ks := &ebpf.CollectionSpec{Maps: map[string]*ebpf.MapSpec{}, Programs: map[string]*ebpf.ProgramSpec{}}
	ks.Maps["calls"] = spec.Maps["calls"].Copy()
	ks.Maps["launch_stamps"] = spec.Maps["launch_stamps"].Copy()
	ks.Maps["launch_stamps"].Type = ebpf.Array
	syms := map[string]string{"ll_cudaLaunchKernel": "cudaLaunchKernel", "ll_cudaGraphLaunch": "cudaGraphLaunch"}
	for p := range syms {
		ks.Programs[p] = spec.Programs[p].Copy()
	}
	coll, err := ebpf.NewCollection(ks)
	if err != nil {
		t.Fatal(err)
	}
	defer coll.Close()
	ex, err := link.OpenExecutable(bin)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	stdin, _ := cmd.StdinPipe()
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	for p, sym := range syms {
		l, err := ex.Uprobe(sym, coll.Programs[p], &link.UprobeOptions{PID: cmd.Process.Pid})
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal(err)
		}
		defer l.Close()
	}
	stdin.Write([]byte("g"))
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	var calls [8]uint64
	for i := range calls {
		var per []uint64
		if err := coll.Maps["calls"].Lookup(uint32(i), &per); err != nil {
			t.Fatal(err)
		}
		for _, n := range per {
			calls[i] += n
		}
	}
	if calls[kindRuntime] != 30 || calls[kindGraphRT] != 20 || calls[kindDriver] != 0 {
		t.Fatalf("calls by kind %v: want runtime 30, graph 20, driver 0", calls)
	}
	tid, err := strconv.Atoi(strings.Fields(out.String())[0])
	if err != nil {
		t.Fatalf("app printed %q", out.String())
	}
	var st struct{ T, Tag uint64 }
	if err := coll.Maps["launch_stamps"].Lookup(uint32(tid*4%4096), &st); err != nil {
		t.Fatal(err)
	}
	if st.Tag>>32 != uint64(tid) || st.Tag&0xFF != kindRuntime|kindPending || st.T == 0 {
		t.Fatalf("thread %d's slot: time %d, tag %#x; want its tid and a pending runtime stamp", tid, st.T, st.Tag)
	}
}

// Without --uprobe the tool loads no CPU program (the agent stamps), and
// keeps the GPU probe and the maps it and the agent use.
func TestDropUprobes(t *testing.T) {
	spec, err := loadLaunchlate()
	if err != nil {
		t.Fatal(err)
	}
	if err := dropUprobes(spec); err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for n, p := range spec.Programs {
		names = append(names, n+"="+p.SectionName)
		if strings.HasPrefix(p.SectionName, "uprobe") {
			t.Errorf("program %s (%s) kept", n, p.SectionName)
		}
	}
	if spec.Programs["launchlate_entry"] == nil || len(spec.Programs) != 1 {
		t.Errorf("programs after dropUprobes: %v, want launchlate_entry alone", names)
	}
	for _, m := range []string{"launch_stamps", "starts", "nstarts"} {
		if spec.Maps[m] == nil {
			t.Errorf("map %s dropped", m)
		}
	}
}
