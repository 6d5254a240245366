package sanpatch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/gpubpf/gpubpf/pkg/runtime/ptx"
)

// Ptxas is a ptxas binary and the CUDA release it comes from. The patch
// module must be a cubin of ptxas --compile-as-tools-patch (nvJitLink
// refuses the option, the driver's JIT has none), so the agent needs one on
// the machine: on a PyTorch machine with no CUDA toolkit, Triton's.
type Ptxas struct {
	Path    string
	Release [2]int // CUDA release, {12, 8} for "release 12.8"
}

// systemDirs are searched after $CUDA_HOME/bin and before $PATH.
var systemDirs = []string{"/usr/local/cuda/bin"}

// FindPtxas returns the first ptxas that answers --version with a CUDA
// release, looking in: $GPUBPF_PTXAS (the binary itself: when set, it is
// the only one tried), each of extraDirs (e.g. the bin directory of the
// Triton the target process loaded, whose ptxas matches that machine's
// driver better than a stray toolkit), $CUDA_HOME/bin, /usr/local/cuda/bin,
// then $PATH.
func FindPtxas(extraDirs ...string) (Ptxas, error) {
	if p := os.Getenv("GPUBPF_PTXAS"); p != "" {
		r, err := release(p)
		if err != nil {
			return Ptxas{}, fmt.Errorf("GPUBPF_PTXAS=%s: %w", p, err)
		}
		return Ptxas{Path: p, Release: r}, nil
	}
	dirs := append([]string(nil), extraDirs...)
	if h := os.Getenv("CUDA_HOME"); h != "" {
		dirs = append(dirs, filepath.Join(h, "bin"))
	}
	dirs = append(dirs, systemDirs...)
	var cands []string
	for _, d := range dirs {
		if d != "" {
			cands = append(cands, filepath.Join(d, "ptxas"))
		}
	}
	if p, err := exec.LookPath("ptxas"); err == nil {
		cands = append(cands, p)
	}
	var why []string
	for _, p := range cands {
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			continue
		}
		r, err := release(p)
		if err != nil {
			why = append(why, fmt.Sprintf("%s: %v", p, err))
			continue
		}
		return Ptxas{Path: p, Release: r}, nil
	}
	msg := "no ptxas found (looked in " + strings.Join(dirs, ", ") + " and $PATH)"
	if len(why) > 0 {
		msg = "no usable ptxas (" + strings.Join(why, "; ") + ")"
	}
	return Ptxas{}, errors.New("sanpatch: " + msg + ": set GPUBPF_PTXAS to a ptxas binary or install the CUDA toolkit (Triton's wheel also ships one)")
}

var releaseRe = regexp.MustCompile(`release ([0-9]+)\.([0-9]+)`)

// release runs ptxas --version and parses "release 12.8".
func release(path string) ([2]int, error) {
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil {
		return [2]int{}, fmt.Errorf("--version: %v: %s", err, bytes.TrimSpace(out))
	}
	return parseRelease(string(out))
}

func parseRelease(s string) ([2]int, error) {
	m := releaseRe.FindStringSubmatch(s)
	if m == nil {
		return [2]int{}, fmt.Errorf("no CUDA release in its --version output %q", strings.TrimSpace(s))
	}
	return ptx.ParseVersion(m[1] + "." + m[2])
}

// isaOf is the newest PTX ISA each CUDA release's ptxas accepts.
var isaOf = []struct{ cuda, isa [2]int }{
	{[2]int{11, 8}, [2]int{7, 8}}, {[2]int{12, 0}, [2]int{8, 0}}, {[2]int{12, 1}, [2]int{8, 1}},
	{[2]int{12, 2}, [2]int{8, 2}}, {[2]int{12, 3}, [2]int{8, 3}}, {[2]int{12, 4}, [2]int{8, 4}},
	{[2]int{12, 5}, [2]int{8, 5}}, {[2]int{12, 6}, [2]int{8, 5}}, {[2]int{12, 8}, [2]int{8, 7}},
	{[2]int{12, 9}, [2]int{8, 8}}, {[2]int{13, 0}, [2]int{9, 0}},
}

// MaxPTX returns the newest PTX ISA p accepts; known is false for a
// release newer than the table, which is then assumed to accept any.
func (p Ptxas) MaxPTX() (isa [2]int, known bool) {
	if ptx.VersionLess(isaOf[len(isaOf)-1].cuda, p.Release) {
		return [2]int{}, false
	}
	for i := len(isaOf) - 1; i >= 0; i-- {
		if !ptx.VersionLess(p.Release, isaOf[i].cuda) {
			return isaOf[i].isa, true
		}
	}
	if p.Release[0] == 11 {
		return [2]int{7, p.Release[1]}, true
	}
	return [2]int{6, 0}, true
}

var versionRe = regexp.MustCompile(`(?m)^\s*\.version\s+([0-9]+\.[0-9]+)`)

// Compile assembles a patch module (Module's PTX) for arch with
// ptxas --compile-as-tools-patch and returns the cubin, which the agent
// hands to sanitizerAddPatches. PTX newer than p's release accepts is
// refused before ptxas runs, with what to do about it.
func (p Ptxas) Compile(ctx context.Context, ptxText, arch string) ([]byte, error) {
	isa := "?"
	if m := versionRe.FindStringSubmatch(ptxText); m != nil {
		isa = m[1]
		v, err := ptx.ParseVersion(m[1])
		if max, known := p.MaxPTX(); err == nil && known && ptx.VersionLess(max, v) {
			return nil, fmt.Errorf("sanpatch: %s (CUDA %d.%d) accepts PTX ISA up to %d.%d, the patch module is %s: %s",
				p.Path, p.Release[0], p.Release[1], max[0], max[1], m[1], p.advice(arch, m[1]))
		}
	}
	dir, err := os.MkdirTemp("", "gpubpf-sanpatch-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	in, out := filepath.Join(dir, "patch.ptx"), filepath.Join(dir, "patch.cubin")
	if err := os.WriteFile(in, []byte(ptxText), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, p.Path, "--compile-as-tools-patch", "-arch="+arch, "-o", out, in)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("sanpatch: %s: %w", p.Path, ctx.Err())
		}
		return nil, fmt.Errorf("sanpatch: %s (CUDA %d.%d) --compile-as-tools-patch -arch=%s: %v: %s\n(%s)",
			p.Path, p.Release[0], p.Release[1], arch, err, strings.TrimSpace(stderr.String()), p.advice(arch, isa))
	}
	return os.ReadFile(out)
}

func (p Ptxas) advice(arch, isa string) string {
	return fmt.Sprintf("the sanitizer patch module needs a ptxas that knows %s and PTX ISA %s: set GPUBPF_PTXAS to a newer ptxas or install a newer CUDA toolkit", arch, isa)
}
