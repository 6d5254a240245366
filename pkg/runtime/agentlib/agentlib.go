// Package agentlib finds the in-process agent library that tools preload
// into the CUDA programs they start: next to the tool's executable, in the
// usual install directories, or the copy embedded in the tool binary.
package agentlib

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Name is the file name of the agent library.
const Name = "libgpubpf-agent.so"

//go:embed embedded
var embedded embed.FS

// searchDirs are tried after the executable's own directory.
var searchDirs = []string{"/usr/local/lib/gpubpf", "/usr/lib/gpubpf"}

// Path returns the agent library to preload. A library next to the
// executable wins (it is what `make` just built); then the install
// directories; then the copy embedded in the binary, written once to
// cacheDir (root-owned, so nobody can swap it before the app loads it).
func Path() (string, error) {
	var tried []string
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		for _, p := range []string{filepath.Join(dir, Name), filepath.Join(dir, "..", "lib", "gpubpf", Name)} {
			tried = append(tried, p)
			if isFile(p) {
				return p, nil
			}
		}
	}
	for _, d := range searchDirs {
		p := filepath.Join(d, Name)
		tried = append(tried, p)
		if isFile(p) {
			return p, nil
		}
	}
	if p, err := extractEmbedded("/run/gpubpf/lib"); err == nil {
		return p, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	return "", fmt.Errorf("the gpubpf agent library %s was not found (looked at %v) and this binary has none embedded: build it with 'make agent' and keep it next to the tool", Name, tried)
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// extractEmbedded writes the embedded agent under dir, named by its hash so
// that different tool versions never overwrite each other's library while a
// program still has it mapped.
func extractEmbedded(dir string) (string, error) {
	data, err := embedded.ReadFile("embedded/" + Name)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	p := filepath.Join(dir, "libgpubpf-agent-"+hex.EncodeToString(sum[:8])+".so")
	if old, err := os.ReadFile(p); err == nil && sha256.Sum256(old) == sum {
		return p, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("writing the embedded agent library: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".agent-*")
	if err != nil {
		return "", fmt.Errorf("writing the embedded agent library: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return "", fmt.Errorf("writing the embedded agent library: %w", err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return "", fmt.Errorf("writing the embedded agent library: %w", err)
	}
	return p, nil
}
