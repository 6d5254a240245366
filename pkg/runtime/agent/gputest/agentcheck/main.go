// Command agentcheck drives the gpubpf agent inside a running CUDA program
// on the GPU machine (scripts/gpu/agent-check.sh): it lists kernels,
// fetches the fatbin, aliases a __constant__ global, loads a hand-written
// instrumented PTX clone, activates it and checks the device counter.
//
//	agentcheck -pid PID -mode list                 list modules and kernels
//	agentcheck -pid PID -mode probe -ptx F -n N    instrument vectorAdd, verify
//	agentcheck -pid PID -mode kill  -ptx F -n N    instrument, print ACTIVE, wait (for kill -9)
//	agentcheck -pid PID -mode hold  -ptx F -n N -launches K
//	                                               instrument at module load (hold), expect K launches
package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentclient"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
)

var (
	pid      = flag.Int("pid", 0, "process to attach to")
	mode     = flag.String("mode", "probe", "list, probe, kill or hold")
	ptxFile  = flag.String("ptx", "", "instrumented PTX template (COUNTER_ADDR, DN_ADDR)")
	kname    = flag.String("kernel", "vectorAdd", "substring of the kernel's mangled name")
	nThreads = flag.Uint64("n", 1<<20, "threads per launch (grid x block)")
	wait     = flag.Duration("wait", time.Second, "how long to keep the probe active")
	launches = flag.Uint64("launches", 0, "hold mode: launches the app makes")
	devices  = flag.Int("devices", 1, "probe mode: instrument on devices 0..N-1 (one clone per context)")
	settle   = flag.Duration("settle", 300*time.Millisecond, "wait after deactivating before reading counters")
)

func main() {
	flag.Parse()
	start := time.Now()
	if err := run(start); err != nil {
		fmt.Println("FAIL:", err)
		os.Exit(1)
	}
}

func dial(hold bool) (*agentclient.Conn, error) {
	var last error
	for i := 0; i < 200; i++ {
		c, err := agentclient.DialWith(*pid, agentclient.Options{Client: "agentcheck", Hold: hold})
		if err == nil {
			return c, nil
		}
		last = err
		time.Sleep(25 * time.Millisecond)
	}
	return nil, last
}

func findKernels(inv *agentproto.Inventory) []agentproto.Kernel {
	var out []agentproto.Kernel
	for _, k := range inv.Kernels {
		if strings.Contains(k.Name, *kname) && k.Kind == agentproto.KindKernel {
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		for _, k := range inv.Kernels {
			if strings.Contains(k.Name, *kname) {
				out = append(out, k)
			}
		}
	}
	return out
}

func run(start time.Time) error {
	c, err := dial(*mode == "hold")
	if err != nil {
		return err
	}
	defer c.Close()
	h := c.Info()
	fmt.Printf("hello: pid %d uid %d exe %s agent %s driver %d ptx-isa %d.%d cuda-ready %v (%.1f ms after start)\n",
		h.PID, h.UID, h.Exe, h.AgentVersion, h.DriverVersion, h.PTXISAMax/10, h.PTXISAMax%10, h.CUDAReady,
		ms(time.Since(start)))
	for _, d := range h.Devices {
		fmt.Printf("device %d: %s sm_%d%d\n", d.Ordinal, d.Name, d.Major, d.Minor)
	}
	switch *mode {
	case "list":
		return list(c)
	case "hold":
		return hold(c, start)
	}
	var inv *agentproto.Inventory
	var ks []agentproto.Kernel
	for i := 0; i < 400; i++ {
		if inv, err = c.Inventory(true); err != nil {
			return err
		}
		if ks = findKernels(inv); len(ks) > 0 {
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	if len(ks) == 0 {
		return fmt.Errorf("no kernel named like %q among %d", *kname, len(inv.Kernels))
	}
	fmt.Printf("inventory: %d modules, %d kernels; target %s handle %#x kind %d module %d\n",
		len(inv.Modules), len(inv.Kernels), ks[0].Name, ks[0].Handle, ks[0].Kind, ks[0].ModuleID)
	var targets []agentclient.Target
	if ks[0].Ctx != 0 {
		targets = append(targets, agentclient.InContext(ks[0].Ctx))
	} else {
		for d := 0; d < *devices; d++ {
			targets = append(targets, agentclient.OnDevice(d))
		}
	}
	var counters []uint64
	var tAct time.Time
	for _, target := range targets {
		clone, fn, counter, err := instrument(c, ks[0].ModuleID, target)
		if err != nil {
			return err
		}
		counters = append(counters, counter)
		tAct = time.Now()
		for _, k := range ks {
			if err := c.Activate(k.Handle, clone, fn); err != nil {
				return err
			}
		}
		fmt.Printf("activated %d handle(s) on %+v %.1f ms after start\n", len(ks), target, ms(time.Since(start)))
	}
	if *mode == "kill" {
		fmt.Println("ACTIVE")
		time.Sleep(10 * time.Minute)
		return nil
	}
	// time to the first instrumented launch
	for time.Since(tAct) < 5*time.Second {
		st, err := c.Stats()
		if err != nil {
			return err
		}
		if total(st) > 0 {
			fmt.Printf("first instrumented launch seen %.1f ms after activation, %.1f ms after tool start\n",
				ms(time.Since(tAct)), ms(time.Since(start)))
			break
		}
		time.Sleep(500 * time.Microsecond)
	}
	time.Sleep(*wait)
	if len(targets) > 1 {
		st, err := c.Stats()
		if err != nil {
			return err
		}
		for _, p := range st {
			fmt.Printf("probe on context %#x: %d instrumented launches\n", p.Ctx, p.Launches)
			if p.Launches == 0 {
				return fmt.Errorf("no instrumented launch in context %#x", p.Ctx)
			}
		}
		if _, err := c.Deactivate(0); err != nil {
			return err
		}
		time.Sleep(*settle)
		for i, t := range targets[1:] {
			b, err := c.Read(t, counters[i+1], 8)
			if err != nil {
				return err
			}
			cnt := binary.LittleEndian.Uint64(b)
			fmt.Printf("device %d counter %d = %.3f launches\n", t.Device, cnt, float64(cnt)/float64(*nThreads))
			if cnt == 0 || cnt%*nThreads != 0 {
				return fmt.Errorf("device %d counter %d is not a positive multiple of %d", t.Device, cnt, *nThreads)
			}
		}
	}
	return verify(c, counters[0], targets[0])
}

func total(st []agentproto.ProbeStat) uint64 {
	var n uint64
	for _, s := range st {
		n += s.Launches
	}
	return n
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// instrument fetches the module's image, aliases d_N, allocates the
// counter and loads the clone; returns clone id, function and counter.
func instrument(c *agentclient.Conn, moduleID uint64, t agentclient.Target) (uint64, uint64, uint64, error) {
	img, err := c.FetchImage(moduleID)
	if err != nil {
		return 0, 0, 0, err
	}
	switch {
	case len(img) >= 16 && binary.LittleEndian.Uint32(img) == 0xBA55ED50:
		fmt.Printf("fetched module %d: %d bytes, fatbin magic ok, declared size %d\n", moduleID, len(img),
			16+binary.LittleEndian.Uint64(img[8:]))
	case bytes.Contains(img, []byte(".entry vectorAdd")):
		fmt.Printf("fetched module %d: %d bytes of PTX\n", moduleID, len(img))
	default:
		return 0, 0, 0, fmt.Errorf("module %d image (%d bytes) is neither a fatbin nor the PTX", moduleID, len(img))
	}
	gl, err := c.Globals(moduleID, t, "d_N", "d_calls")
	if err != nil {
		return 0, 0, 0, err
	}
	if gl[0].CUResult != 0 {
		return 0, 0, 0, fmt.Errorf("d_N not found (CUresult %d)", gl[0].CUResult)
	}
	v, err := c.Read(t, gl[0].Addr, 4)
	if err != nil {
		return 0, 0, 0, err
	}
	fmt.Printf("global d_N at %#x size %d value %d; d_calls at %#x (CUresult %d)\n", gl[0].Addr, gl[0].Size,
		binary.LittleEndian.Uint32(v), gl[1].Addr, gl[1].CUResult)
	counter, err := c.Alloc(t, 8)
	if err != nil {
		return 0, 0, 0, err
	}
	tmpl, err := os.ReadFile(*ptxFile)
	if err != nil {
		return 0, 0, 0, err
	}
	ptx := bytes.ReplaceAll(tmpl, []byte("COUNTER_ADDR"), fmt.Appendf(nil, "%d", counter))
	ptx = bytes.ReplaceAll(ptx, []byte("DN_ADDR"), fmt.Appendf(nil, "%d", gl[0].Addr))
	// a JIT failure must come back with its log
	_, jerr := c.LoadPTX(t, []byte(".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry broken() { bogus; }\n"), "broken")
	var ae *agentproto.Error
	if !errors.As(jerr, &ae) {
		return 0, 0, 0, fmt.Errorf("broken PTX was not rejected: %v", jerr)
	}
	fmt.Printf("broken PTX rejected as expected: %s\n", strings.ReplaceAll(ae.Message, "\n", " | "))
	lr, err := c.LoadPTX(t, ptx, "vectorAdd_probe")
	if err != nil {
		return 0, 0, 0, err
	}
	fmt.Printf("clone %d loaded: JIT %.2f ms, function %#x\n", lr.CloneID, float64(lr.LoadNanos)/1e6, lr.Functions[0].Handle)
	return lr.CloneID, lr.Functions[0].Handle, counter, nil
}

func verify(c *agentclient.Conn, counter uint64, t agentclient.Target) error {
	n, err := c.Deactivate(0)
	if err != nil {
		return err
	}
	// The agent's memory ops use their own non-blocking stream (no ordering
	// with the app's work): let launches already issued finish.
	time.Sleep(*settle)
	st, err := c.Stats()
	if err != nil {
		return err
	}
	_ = st
	// Stats after Deactivate is empty: take the count from the counter and
	// check it is a whole number of launches.
	b, err := c.Read(t, counter, 8)
	if err != nil {
		return err
	}
	cnt := binary.LittleEndian.Uint64(b)
	fmt.Printf("deactivated %d probe(s); counter %d = %.3f launches of %d threads\n", n, cnt,
		float64(cnt)/float64(*nThreads), *nThreads)
	if cnt == 0 || cnt%*nThreads != 0 {
		return fmt.Errorf("counter %d is not a positive multiple of %d threads", cnt, *nThreads)
	}
	// memfd shared through SCM_RIGHTS + snapshot
	mfd, err := unix.MemfdCreate("agentcheck", unix.MFD_CLOEXEC)
	if err != nil {
		return err
	}
	mf := os.NewFile(uintptr(mfd), "memfd")
	defer mf.Close()
	if err := mf.Truncate(4096); err != nil {
		return err
	}
	reg, err := c.RegisterMemfd(t, mf, 4096, 0)
	if err != nil {
		return err
	}
	if err := c.Snapshot(t, counter, reg.RegionID, 8, 8, 0); err != nil {
		return err
	}
	mb := make([]byte, 8)
	if _, err := mf.ReadAt(mb, 8); err != nil {
		return err
	}
	if got := binary.LittleEndian.Uint64(mb); got != cnt {
		return fmt.Errorf("memfd snapshot holds %d, counter %d", got, cnt)
	}
	fmt.Printf("memfd region %d (device %#x): snapshot ok (%d)\n", reg.RegionID, reg.DevAddr, cnt)
	// a kernel BPF map (BPF_F_MMAPABLE array) registered the same way
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 512, Flags: unix.BPF_F_MMAPABLE})
	if err != nil {
		fmt.Printf("BPF map check skipped: %v\n", err)
	} else {
		defer m.Close()
		mr, err := c.RegisterBPFMap(t, m.FD(), 4096)
		if err != nil {
			return err
		}
		if err := c.Snapshot(t, counter, mr.RegionID, 16, 8, 0); err != nil {
			return err
		}
		var v uint64
		if err := m.Lookup(uint32(2), &v); err != nil {
			return err
		}
		if v != cnt {
			return fmt.Errorf("BPF map element 2 holds %d, counter %d", v, cnt)
		}
		fmt.Printf("BPF map region %d (device %#x): kernel lookup sees %d\n", mr.RegionID, mr.DevAddr, v)
	}
	if err := c.Detach(); err != nil {
		return err
	}
	fmt.Println("PASS probe")
	return nil
}

func list(c *agentclient.Conn) error {
	inv, err := c.Inventory(true)
	if err != nil {
		return err
	}
	formats := map[agentproto.ImageFormat]int{}
	for _, m := range inv.Modules {
		formats[m.Format]++
	}
	fmt.Printf("inventory: %d modules %v, %d kernels\n", len(inv.Modules), formats, len(inv.Kernels))
	named := 0
	for i, k := range inv.Kernels {
		if k.Name != "" {
			named++
		}
		if i < 8 {
			fmt.Printf("  kernel %#x kind %d module %d %s\n", k.Handle, k.Kind, k.ModuleID, k.Name)
		}
	}
	fmt.Printf("named kernels: %d of %d\n", named, len(inv.Kernels))
	checked := 0
	for _, m := range inv.Modules {
		if m.Format != agentproto.FormatFatbin || checked >= 3 {
			continue
		}
		img, err := c.FetchImage(m.ID)
		if err != nil {
			return err
		}
		if binary.LittleEndian.Uint32(img) != 0xBA55ED50 {
			return fmt.Errorf("module %d: bad fatbin magic", m.ID)
		}
		checked++
	}
	fmt.Printf("fetched %d fatbins, magic ok\n", checked)
	st, err := c.Stats()
	if err != nil {
		return err
	}
	fmt.Printf("PASS list (%d active probes in this session)\n", len(st))
	return nil
}

// hold instruments at module load, before the app's first launch.
func hold(c *agentclient.Conn, start time.Time) error {
	var counter, clone, fn uint64
	done := false
	deadline := time.After(30 * time.Second)
	for !done {
		select {
		case n, ok := <-c.Notifications():
			if !ok {
				return fmt.Errorf("connection ended")
			}
			if n.ModuleLoaded == nil {
				continue
			}
			inv, err := c.Inventory(true)
			if err != nil {
				return err
			}
			var ks []agentproto.Kernel
			for _, k := range findKernels(inv) {
				if k.ModuleID == n.ModuleLoaded.ID {
					ks = append(ks, k)
				}
			}
			if len(ks) > 0 {
				if clone, fn, counter, err = instrument(c, n.ModuleLoaded.ID, agentclient.OnDevice(0)); err != nil {
					return err
				}
				for _, k := range ks {
					if err := c.Activate(k.Handle, clone, fn); err != nil {
						return err
					}
				}
				fmt.Printf("module %d held and instrumented (%d handle(s)) %.1f ms after start\n",
					n.ModuleLoaded.ID, len(ks), ms(time.Since(start)))
				done = true
			}
			if err := c.Continue(n.ModuleLoaded.ID); err != nil {
				return err
			}
		case <-deadline:
			return fmt.Errorf("no module with kernel %q within 30 s", *kname)
		}
	}
	for {
		st, err := c.Stats()
		if err != nil {
			return err
		}
		if total(st) >= *launches {
			fmt.Printf("instrumented launches %d of %d\n", total(st), *launches)
			break
		}
		select {
		case <-deadline:
			return fmt.Errorf("only %d of %d launches were instrumented", total(st), *launches)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return verify(c, counter, agentclient.OnDevice(0))
}
