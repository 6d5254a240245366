package repotree

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func elfHeader(typ byte) []byte {
	h := make([]byte, 64)
	copy(h, "\x7fELF\x02\x01\x01")
	h[16] = typ
	return h
}

func TestProblem(t *testing.T) {
	for _, tc := range []struct {
		path string
		size int64
		head []byte
		bad  bool
	}{
		{"gpuevent_snoop", 12 << 20, elfHeader(2), true},
		{"tools/x/lib.so", 4096, elfHeader(3), true},
		{"tools/x/x_bpfel.o", 30000, elfHeader(1), false},
		{"pkg/fatbin/testdata/vec_add", 700000, elfHeader(2), false},
		{"docs/big.md", MaxSize + 1, []byte("# big"), true},
		{"testdata/huge.bin", MaxSize * 8, nil, false},
		{"README.md", 9000, []byte("# gpubpf"), false},
	} {
		if got := Problem(tc.path, tc.size, tc.head); (got != "") != tc.bad {
			t.Errorf("%s: %q, want bad=%v", tc.path, got, tc.bad)
		}
	}
}

// TestTrackedFiles runs the check on this repository's tracked files.
func TestTrackedFiles(t *testing.T) {
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skip("not a git checkout")
	}
	dir := strings.TrimSpace(string(root))
	out, err := exec.Command("git", "-C", dir, "ls-files", "-z").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range bytes.Split(bytes.TrimRight(out, "\x00"), []byte{0}) {
		path := string(p)
		f, err := os.Open(filepath.Join(dir, path))
		if err != nil {
			continue // deleted in the work tree
		}
		st, _ := f.Stat()
		head := make([]byte, 64)
		n, _ := io.ReadFull(f, head)
		f.Close()
		if st.IsDir() {
			continue
		}
		if msg := Problem(path, st.Size(), head[:n]); msg != "" {
			t.Error(msg)
		}
	}
}
