// Package instrument builds the instrumented clone of a PTX module: it keeps
// only the selected kernels and what they reference, points the clone's
// variables at the original module's (so the application's __device__ and
// __constant__ state is shared), and inserts calls to probe functions at
// kernel entry, at every exit and after global memory accesses.
//
// Each pass is an exported method of Clone so it can be tested and composed
// on its own; Instrument runs them in the order that keeps them independent:
// Extract, AliasGlobals, RedirectStubs, InsertEntry, InsertExit,
// InsertMemAccess, then AddProbes and FixHeader.
package instrument

import (
	"path"
	"sort"
	"strings"

	"github.com/gpubpf/gpubpf/pkg/runtime/fatbin"
)

// names are the spellings a kernel can be selected by.
func names(mangled string) (base, sig string) { return fatbin.Demangle(mangled) }

// MatchOne reports whether pattern selects the kernel: equal to the mangled
// name, the demangled name without parameters or the full signature, or a
// glob (path.Match syntax) over any of them.
func MatchOne(pattern, mangled string) bool {
	k := kernelNames{mangled: mangled}
	return k.match(pattern)
}

// kernelNames demangles a kernel's name once, and only when a pattern is
// not its mangled name: demangling was most of a -p attach to a module of
// 200 kernels, each demangled once per pattern (60 ms, H100 2026-11-24).
type kernelNames struct {
	mangled, base, sig string
	demangled          bool
}

func (k *kernelNames) match(pattern string) bool {
	glob := strings.ContainsAny(pattern, "*?[")
	is := func(n string) bool {
		if pattern == n {
			return true
		}
		if !glob {
			return false
		}
		ok, err := path.Match(pattern, n)
		return err == nil && ok
	}
	if is(k.mangled) {
		return true
	}
	if !k.demangled {
		k.base, k.sig = names(k.mangled)
		k.demangled = true
	}
	return is(k.base) || is(k.sig)
}

// Match returns the kernels (in the order given) selected by any pattern.
// If some pattern selects nothing, closest lists the kernels whose names are
// nearest to it, so a tool can say "did you mean ...".
func Match(patterns []string, kernels []string) (matched []string, closest []string) {
	hit := make([]bool, len(patterns))
	for _, k := range kernels {
		kn := kernelNames{mangled: k}
		for i, p := range patterns {
			if kn.match(p) {
				hit[i] = true
				matched = append(matched, k)
				break
			}
		}
	}
	// A kernel matched by several patterns is listed once (break above);
	// patterns that matched nothing get suggestions.
	seen := map[string]bool{}
	for i, p := range patterns {
		if hit[i] {
			continue
		}
		for _, k := range nearest(p, kernels, 3) {
			if !seen[k] {
				seen[k] = true
				closest = append(closest, k)
			}
		}
	}
	return matched, closest
}

func nearest(p string, kernels []string, n int) []string {
	type cand struct {
		k string
		d int
	}
	var cs []cand
	lp := strings.ToLower(strings.Trim(p, "*?"))
	for _, k := range kernels {
		base, _ := names(k)
		d := editDistance(lp, strings.ToLower(base))
		if lp != "" && (strings.Contains(strings.ToLower(base), lp) || strings.Contains(strings.ToLower(k), lp)) {
			d = 0
		}
		cs = append(cs, cand{k, d})
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].d < cs[j].d })
	var out []string
	for i := 0; i < len(cs) && i < n; i++ {
		// Suggest only names that are plausibly what was meant.
		if cs[i].d <= max(3, len(lp)/2) {
			out = append(out, cs[i].k)
		}
	}
	return out
}

func editDistance(a, b string) int {
	if len(a) > 256 || len(b) > 256 {
		return 1 << 20
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
