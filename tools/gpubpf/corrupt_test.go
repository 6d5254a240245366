package main

import (
	"bytes"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

// The fault suite's case 8 (issue 13; scripts/gpu/faults-check.sh runs it
// against a CUDA sample): a corrupt BPF object given to gpubpf run is a
// clear error that names the file, and the command is never started.

const goodObject = "../../bpf/examples/counter_bpfel.o"

func runRun(t *testing.T, args ...string) (stderr string, rc int) {
	t.Helper()
	app := newApp()
	var out, errb bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errb
	rc = toolkit.RunArgs(app, append([]string{"gpubpf", "run"}, args...), &errb)
	return errb.String(), rc
}

func TestRunCorruptObject(t *testing.T) {
	good, err := os.ReadFile(goodObject)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(13))
	random := make([]byte, 4096)
	rng.Read(random)
	elfGarbage := append([]byte("\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\xf7\x00"), random[:2048]...)
	dir := t.TempDir()
	const notELF, unreadable = " is not an ELF file, so not a BPF object", " is not a BPF object gpubpf can read"
	for _, tc := range []struct {
		name, want string
		data       []byte
	}{
		{"empty", notELF, nil},
		{"truncated-16", unreadable, good[:16]},
		{"truncated-64", unreadable, good[:64]},
		{"truncated-half", unreadable, good[:len(good)/2]},
		{"truncated-1", unreadable, good[:len(good)-1]},
		{"random", notELF, random},
		{"elf-header-then-garbage", unreadable, elfGarbage},
		{"text", notELF, []byte("this is not an ELF file\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := filepath.Join(dir, tc.name+".o")
			os.WriteFile(obj, tc.data, 0o644)
			marker := filepath.Join(dir, tc.name+".started")
			errs, rc := runRun(t, obj, "--", "sh", "-c", "touch "+marker)
			if rc != toolkit.ExitError || !strings.Contains(errs, obj+tc.want) {
				t.Errorf("rc %d, stderr %q; want 1 and %q", rc, errs, obj+tc.want)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("the command was started although the object is unreadable")
			}
		})
	}
	if _, rc := runRun(t, filepath.Join(dir, "missing.o"), "--", "true"); rc != toolkit.ExitError {
		t.Errorf("missing object: rc %d, want 1", rc)
	}
}

// Every byte of a real object flipped in turn: never a panic; either an
// error naming the file, or (a flip that changes nothing that matters) the
// object loads and the run goes on to its target (here a PID that does not
// exist, so nothing is started either way).
func TestRunFlippedObject(t *testing.T) {
	good, err := os.ReadFile(goodObject)
	if err != nil {
		t.Fatal(err)
	}
	obj := filepath.Join(t.TempDir(), "flipped.o")
	named, loaded := 0, 0
	step := 1
	if testing.Short() {
		step = 7
	}
	for off := 0; off < len(good); off += step {
		b := bytes.Clone(good)
		b[off] ^= 0xff
		os.WriteFile(obj, b, 0o644)
		errs, rc := runRun(t, "-p", "2147483647", obj)
		switch {
		case rc != toolkit.ExitError && rc != toolkit.ExitUsage:
			t.Fatalf("byte %d flipped: rc %d, stderr %q", off, rc, errs)
		case strings.Contains(errs, obj):
			named++
		case strings.Contains(errs, "no process 2147483647"):
			loaded++
		default:
			t.Fatalf("byte %d flipped: an error that does not name the object: %q", off, errs)
		}
	}
	t.Logf("%d flips: %d refused naming the file, %d harmless (the object still loads)", named+loaded, named, loaded)
	if named == 0 {
		t.Fatal("no flip was refused: is the object being read at all?")
	}
}
