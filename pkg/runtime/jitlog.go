package runtime

import (
	"regexp"
	"strings"
)

var (
	jitEntryRE = regexp.MustCompile(`Compiling entry function '([^']+)'`)
	jitPropsRE = regexp.MustCompile(`Function properties for (\S+)`)
	jitRegsRE  = regexp.MustCompile(`Used (\d+) registers`)
	jitFrameRE = regexp.MustCompile(`(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads`)
)

// jitResources condenses the driver JIT's verbose info log to one line per
// entry function: its registers and stack, what decides the instrumented
// clone's occupancy (a probe that raises a kernel's registers can cost it
// more than the probe's own work). Device functions are left out.
func jitResources(log string) []string {
	type fn struct{ regs, frame string }
	var order []string
	fns := map[string]*fn{}
	// "Used" lines follow the entry being compiled; a frame line follows
	// "Function properties for" its function, an entry's or a device
	// function's (left out).
	entry, props := "", ""
	for _, l := range strings.Split(log, "\n") {
		if m := jitEntryRE.FindStringSubmatch(l); m != nil {
			entry, props = m[1], ""
			if fns[entry] == nil {
				fns[entry] = &fn{}
				order = append(order, entry)
			}
			continue
		}
		if m := jitPropsRE.FindStringSubmatch(l); m != nil {
			props = m[1]
			continue
		}
		if m := jitRegsRE.FindStringSubmatch(l); m != nil && fns[entry] != nil {
			fns[entry].regs = m[1]
		}
		if m := jitFrameRE.FindStringSubmatch(l); m != nil && fns[props] != nil {
			fns[props].frame = m[1] + " bytes stack, " + m[2] + "/" + m[3] + " bytes spilled/reloaded"
		}
	}
	var out []string
	for _, name := range order {
		f := fns[name]
		if f.regs == "" {
			continue
		}
		s := name + ": " + f.regs + " registers"
		if f.frame != "" {
			s += ", " + f.frame
		}
		out = append(out, s)
	}
	return out
}
