// Package tritoncache finds the PTX a Triton kernel was compiled from.
// Triton (and so torch.compile's Inductor) hands the driver a cubin with no
// PTX in it, but keeps in its cache, next to each NAME.cubin it built, the
// NAME.ptx it built it from. A cubin a process loaded that is byte for byte
// one of those files has that PTX: the runtime instruments the kernel from
// it, so the per-thread tools see inside Triton's kernels.
//
// Only an exact match counts: a kernel of the same name compiled with
// other constants is another kernel, and instrumenting the wrong one would
// run the wrong code in the application.
package tritoncache

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpubpf/gpubpf/pkg/procmaps"
)

// Cache indexes the cubins of Triton cache directories by content.
type Cache struct {
	mu      sync.Mutex
	files   map[string]fileSum   // cubin path -> what it held when summed
	byHash  map[[32]byte]string  // content -> a cubin path with it
	scanned map[string]time.Time // directory -> when last walked
	maxAge  time.Duration        // walk a directory again after this
	now     func() time.Time
}

type fileSum struct {
	size  int64
	mtime time.Time
	sum   [32]byte
}

// New returns an empty cache.
func New() *Cache {
	return &Cache{files: map[string]fileSum{}, byHash: map[[32]byte]string{}, scanned: map[string]time.Time{},
		maxAge: time.Second, now: time.Now}
}

// maxDepth bounds the walk below each directory: Triton's cache is
// DIR/HASH/NAME.cubin, Inductor's DIR/triton/DEVICE/HASH/NAME.cubin.
const maxDepth = 4

// PTXFor returns the PTX Triton built cubin from, and where it was found,
// looking in dirs (Dirs); ok is false when no cached cubin is cubin.
func (c *Cache) PTXFor(cubin []byte, dirs []string) (ptx []byte, path string, ok bool) {
	want := sha256.Sum256(cubin)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range dirs {
		if t, done := c.scanned[d]; done && c.now().Sub(t) < c.maxAge {
			continue
		}
		c.scan(d, int64(len(cubin)))
		c.scanned[d] = c.now()
	}
	p, found := c.byHash[want]
	if !found {
		return nil, "", false
	}
	ptxPath := strings.TrimSuffix(p, ".cubin") + ".ptx"
	b, err := os.ReadFile(ptxPath)
	if err != nil || !bytes.Contains(b, []byte(".entry")) {
		return nil, "", false
	}
	return b, ptxPath, true
}

// scan sums the cubins under dir that are new or changed, of size (only a
// cubin of the wanted size can match: the rest wait for a call that wants
// theirs).
func (c *Cache) scan(dir string, size int64) {
	base := strings.Count(filepath.Clean(dir), string(filepath.Separator))
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable: skip it
		}
		if d.IsDir() {
			if strings.Count(filepath.Clean(path), string(filepath.Separator))-base >= maxDepth {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".cubin") || !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil || info.Size() != size {
			return nil
		}
		if f, ok := c.files[path]; ok && f.size == info.Size() && f.mtime.Equal(info.ModTime()) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		s := sha256.Sum256(b)
		c.files[path] = fileSum{info.Size(), info.ModTime(), s}
		c.byHash[s] = path
		return nil
	})
}

// Dirs returns where the Triton caches of process pid are, existing ones
// only: its TRITON_CACHE_DIR, its TORCHINDUCTOR_CACHE_DIR's triton/, the
// default ~/.triton/cache of its HOME, and Inductor's default
// /tmp/torchinductor_USER/triton (USER: the process's user). Paths are as
// this tool sees them (through /proc/pid/root when the process is in
// another mount namespace).
func Dirs(pid int) []string {
	env := procmaps.Environ(pid)
	root := "/proc/" + strconv.Itoa(pid) + "/root"
	if same(root, "/") {
		root = ""
	}
	var cands []string
	if d := env["TRITON_CACHE_DIR"]; d != "" {
		cands = append(cands, d)
	}
	if d := env["TORCHINDUCTOR_CACHE_DIR"]; d != "" {
		cands = append(cands, filepath.Join(d, "triton"))
	}
	if h := env["HOME"]; h != "" {
		cands = append(cands, filepath.Join(h, ".triton", "cache"))
	}
	if u := userOf(pid, env); u != "" {
		cands = append(cands, filepath.Join("/tmp", "torchinductor_"+u, "triton"))
	}
	var out []string
	seen := map[string]bool{}
	for _, d := range cands {
		if !filepath.IsAbs(d) {
			continue
		}
		p := root + d
		if seen[p] {
			continue
		}
		seen[p] = true
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			out = append(out, p)
		}
	}
	return out
}

// userOf is the name of pid's user as Inductor's getpass.getuser() finds
// it: a USER-like variable of its environment env, else its real uid's.
func userOf(pid int, env map[string]string) string {
	for _, k := range []string{"LOGNAME", "USER", "LNAME", "USERNAME"} {
		if v := env[k]; v != "" {
			return v
		}
	}
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) >= 2 && fs[0] == "Uid:" {
			if u, err := user.LookupId(fs[1]); err == nil {
				return u.Username
			}
			return ""
		}
	}
	return ""
}

func same(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}
