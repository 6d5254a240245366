// Package repotree checks what the repository tracks: no built program
// and no large file outside test fixtures (a stray `go build` at the root
// once committed a 12 MB executable).
package repotree

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
)

// MaxSize is the largest file tracked outside test fixtures.
const MaxSize = 1 << 20

// IsFixture reports whether path is under a testdata directory.
func IsFixture(path string) bool {
	return strings.HasPrefix(path, "testdata/") || strings.Contains(path, "/testdata/")
}

// Problem says what is wrong with a tracked file of this size whose
// content starts with head (its first 18 bytes or more), or "".
// Relocatable objects (bpf2go's committed .o files) are fine; ELF
// executables and shared objects are built programs.
func Problem(path string, size int64, head []byte) string {
	if IsFixture(path) {
		return ""
	}
	if len(head) >= 18 && bytes.HasPrefix(head, []byte("\x7fELF")) {
		var typ uint16
		if head[5] == 2 {
			typ = binary.BigEndian.Uint16(head[16:])
		} else {
			typ = binary.LittleEndian.Uint16(head[16:])
		}
		if typ == 2 || typ == 3 { // ET_EXEC, ET_DYN
			return fmt.Sprintf("%s is a built program (ELF type %d): remove it from git (`git rm --cached %s`); fixtures go under testdata/", path, typ, path)
		}
	}
	if size > MaxSize {
		return fmt.Sprintf("%s is %d bytes (over %d): large files go under testdata/ when they are fixtures, else out of git", path, size, MaxSize)
	}
	return ""
}
