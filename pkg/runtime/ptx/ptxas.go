package ptx

import (
	"os/exec"
	"strings"
)

// PtxasMaxISA returns the newest PTX ISA the given ptxas accepts, from its
// release number (11.8 -> 7.8, 12.x -> 8.x, 13.0 -> 9.0).
func PtxasMaxISA(ptxas string) [2]int {
	out, err := exec.Command(ptxas, "--version").CombinedOutput()
	if err != nil {
		return [2]int{}
	}
	s := string(out)
	i := strings.Index(s, "release ")
	if i < 0 {
		return [2]int{}
	}
	v, err := ParseVersion(strings.TrimRight(strings.Fields(s[i+8:])[0], ","))
	if err != nil {
		return [2]int{}
	}
	switch {
	case v[0] == 11:
		return [2]int{7, v[1]}
	case v[0] == 12:
		return [2]int{8, v[1]}
	case v[0] >= 13:
		return [2]int{v[0] - 4, v[1]}
	}
	return [2]int{}
}
