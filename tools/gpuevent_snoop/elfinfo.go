package gpuevent_snoop

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// function is a function an ELF object defines, as a uprobe needs it.
type function struct {
	fileOff uint64 // where its first instruction is in the file
	probe   probePoint
}

// elfInfo is what the tool needs from one object: the functions it could
// probe and whether its own code may call the driver's launch functions.
type elfInfo struct {
	funcs map[string]function
	// imports lists the driver launch functions the object imports
	// (undefined dynamic symbols): it calls them through its PLT or GOT.
	imports []string
	// mentions: the object's read-only data names a driver launch
	// function, as code that looks it up by name (dlsym,
	// cuGetProcAddress) or a cudart linked into it (its table of
	// driver entry points) has to.
	mentions bool
	// needed and runpath: the libraries it links and where it says to
	// look for them (DT_NEEDED, DT_RUNPATH/DT_RPATH).
	needed, runpath []string
}

// driverLaunchNames are the driver launch functions, as imported or looked
// up by name.
var driverLaunchNames = func() map[string]bool {
	m := map[string]bool{"cuLaunchCooperativeKernel": true}
	for i := range apis {
		if apis[i].isDriverLaunch() {
			m[apis[i].Name] = true
		}
	}
	return m
}()

// readELFInfo reads an object's functions among want (with where to probe
// each) and how it may reach the driver's launch functions.
func readELFInfo(path string, want map[string]bool) (*elfInfo, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading ELF file %s: %w", path, err)
	}
	defer f.Close()
	info := &elfInfo{funcs: map[string]function{}}
	for _, get := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		syms, err := get()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return nil, fmt.Errorf("reading ELF symbols of %s: %w", path, err)
		}
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) != elf.STT_FUNC {
				continue
			}
			if s.Section == elf.SHN_UNDEF {
				if driverLaunchNames[s.Name] && !slices.Contains(info.imports, s.Name) {
					info.imports = append(info.imports, s.Name)
				}
				continue
			}
			if !want[s.Name] || s.Value == 0 {
				continue
			}
			if _, ok := info.funcs[s.Name]; ok {
				continue
			}
			fn, ok := locate(f, s)
			if ok {
				info.funcs[s.Name] = fn
			}
		}
	}
	info.mentions = mentionsDriverLaunch(f)
	info.needed, _ = f.ImportedLibraries()
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		v, _ := f.DynString(tag)
		info.runpath = append(info.runpath, v...)
	}
	return info, nil
}

// locate finds a function symbol's file offset and code.
func locate(f *elf.File, s elf.Symbol) (function, bool) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X == 0 || s.Value < p.Vaddr || s.Value >= p.Vaddr+p.Filesz {
			continue
		}
		off := s.Value - p.Vaddr + p.Off
		// The whole function, to tell whether its code branches back to
		// a candidate probe point; an unknown size gets 16 bytes (and the
		// entry: nothing can be ruled out).
		n := min(max(s.Size, 16), 64<<10)
		code := make([]byte, n)
		k, err := p.ReadAt(code, int64(off-p.Off))
		if err != nil && !errors.Is(err, io.EOF) {
			return function{}, false
		}
		return function{fileOff: off, probe: choosePoint(code[:k], s.Size != 0)}, true
	}
	return function{}, false
}

// mentionsDriverLaunch looks for the name "cuLaunchKernel" in an object's
// read-only data (any of the driver launch functions starts with it).
func mentionsDriverLaunch(f *elf.File) bool {
	for _, name := range []string{".rodata", ".dynstr", ".data.rel.ro"} {
		sec := f.Section(name)
		if sec == nil || sec.Type == elf.SHT_NOBITS {
			continue
		}
		if found, _ := sectionContains(sec, []byte("cuLaunchKernel")); found {
			return true
		}
	}
	return false
}

// sectionContains scans a section in chunks: the .rodata of a framework's
// CUDA library runs to hundreds of MiB.
func sectionContains(sec *elf.Section, needle []byte) (bool, error) {
	const chunk = 4 << 20
	r := sec.Open()
	buf := make([]byte, chunk+len(needle))
	carry := 0
	for {
		n, err := io.ReadFull(r, buf[carry:])
		if bytes.Contains(buf[:carry+n], needle) {
			return true, nil
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return false, nil
			}
			return false, err
		}
		carry = copy(buf, buf[carry+n-len(needle):carry+n])
	}
}

// probePoint is where in a function its entry uprobe goes, and what the
// kernel does there. A uprobe replaces an instruction with int3; after the
// handler, the kernel either emulates the instruction (push, jmp, call,
// jcc, one-byte nop: one trap) or executes it out of line with a single
// step (a second trap: on the VM of the CPU proxy benchmark 15 us instead of
// 0.6). Kernel 6.18 turns a probe on a 5-byte nop into a call to a
// trampoline that enters through a syscall, cheaper still.
type probePoint struct {
	off     uint64 // bytes after the function's start
	stepped bool   // the kernel single-steps the probed instruction
	note    string // what the probe sits on, for -v and the account
}

// choosePoint picks the probe point: the first instruction, unless it is
// endbr64 (which the kernel single-steps) followed by one the kernel
// emulates. endbr64 changes no register and no memory, so the registers
// and stack at +4 are those at entry; the skip is made only when nothing
// in the function branches to +4 (which would fire the probe twice).
// hasSize: the symbol's size is known, so code is the whole function.
func choosePoint(code []byte, hasSize bool) probePoint {
	if kind, ok := fastInsn(code); ok {
		return probePoint{note: kind}
	}
	if isEndbr64(code) && hasSize {
		if kind, ok := fastInsn(code[4:]); ok && !branchesTo(code, 4) {
			return probePoint{off: 4, note: "after endbr64: " + kind}
		}
	}
	return probePoint{stepped: true, note: "single-stepped " + insnBytes(code)}
}

func isEndbr64(code []byte) bool { return bytes.HasPrefix(code, []byte{0xf3, 0x0f, 0x1e, 0xfa}) }

// fastInsn reports whether the kernel handles the instruction at code[0]
// without a single step (arch/x86/kernel/uprobes.c: branch_setup_xol_ops,
// push_setup_xol_ops; the nop5 optimisation of 6.18).
func fastInsn(code []byte) (string, bool) {
	if len(code) == 0 {
		return "", false
	}
	switch b := code[0]; {
	case b >= 0x50 && b <= 0x57:
		return "push, emulated", true
	case b == 0x41 && len(code) > 1 && code[1] >= 0x50 && code[1] <= 0x57:
		return "push, emulated", true
	case b == 0x90:
		return "nop, emulated", true
	case b == 0xe8 || b == 0xe9 || b == 0xeb:
		return "call/jmp, emulated", true
	case b >= 0x70 && b <= 0x7f:
		return "jcc, emulated", true
	case b == 0x0f && len(code) > 1 && code[1] >= 0x80 && code[1] <= 0x8f:
		return "jcc, emulated", true
	case bytes.HasPrefix(code, []byte{0x0f, 0x1f, 0x44, 0x00, 0x00}):
		return "nop5, optimised on 6.18+", true
	}
	return "", false
}

// branchesTo reports whether any byte sequence of code decodes as a direct
// jump or call to offset target. It does not decode instructions, so it
// errs on the side of yes.
func branchesTo(code []byte, target int) bool {
	for i := range code {
		var dst int
		switch b := code[i]; {
		case (b == 0xeb || (b >= 0x70 && b <= 0x7f)) && i+2 <= len(code):
			dst = i + 2 + int(int8(code[i+1]))
		case (b == 0xe8 || b == 0xe9) && i+5 <= len(code):
			dst = i + 5 + int(int32(binary.LittleEndian.Uint32(code[i+1:])))
		case b == 0x0f && i+6 <= len(code) && code[i+1] >= 0x80 && code[i+1] <= 0x8f:
			dst = i + 6 + int(int32(binary.LittleEndian.Uint32(code[i+2:])))
		default:
			continue
		}
		if dst == target {
			return true
		}
	}
	return false
}

func insnBytes(code []byte) string {
	n := min(len(code), 4)
	return fmt.Sprintf("(% x)", code[:n])
}
