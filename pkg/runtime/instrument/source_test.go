package instrument

import (
	"strings"
	"testing"
)

// PTXFromFile finds a kernel's PTX in each kind of file a user has at hand.
func TestPTXFromFile(t *testing.T) {
	for _, c := range []struct {
		file, pattern, kernel, err string
	}{
		{"../fatbin/testdata/multi_default_cuda118", "*", "", ""},
		{"../fatbin/testdata/vec_add_sm80_cuda118", "vectorAdd", "_Z9vectorAddPKfS0_Pfi", ""},
		{"../fatbin/testdata/libmulti_cuda118.so", "*", "", ""},
		{"../fatbin/testdata/vec_add_cuda118.fatbin", "_Z9vectorAddPKfS0_Pfi", "_Z9vectorAddPKfS0_Pfi", ""},
		{"testdata/vec_add_sample_cuda118.ptx", "anything", "", ""},
		{"../fatbin/testdata/vec_add_cuda118.fatbin", "noSuchKernel", "", `no kernel matches "noSuchKernel"`},
		{"../fatbin/testdata/vec_add_sm90sass_cuda118", "vectorAdd", "", "PTX"},
		{"testdata/no-such-file", "*", "", "no such file"},
	} {
		src, kernel, err := PTXFromFile(c.file, c.pattern)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s %s: error %v, want one saying %q", c.file, c.pattern, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s %s: %v", c.file, c.pattern, err)
			continue
		}
		if c.kernel != "" && kernel != c.kernel || !strings.Contains(src, ".entry") {
			t.Errorf("%s %s: kernel %q (want %q), PTX with an .entry: %v", c.file, c.pattern, kernel, c.kernel, strings.Contains(src, ".entry"))
		}
	}
}
