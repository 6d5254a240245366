package btffmt

import (
	"bytes"
	"encoding/json"
	"testing"
)

// checkJSONString compares AppendJSONString with encoding/json: byte for
// byte with HTML escaping off, and by decoding the output, which must give
// the string json.Marshal's output decodes to.
func checkJSONString(t *testing.T, s []byte) {
	t.Helper()
	prefix := []byte(`{"k":`)
	got := AppendJSONString(prefix, s)
	if !bytes.HasPrefix(got, []byte(`{"k":`)) {
		t.Fatalf("%q: prefix clobbered: %q", s, got)
	}
	got = got[len(prefix):]

	var want bytes.Buffer
	enc := json.NewEncoder(&want)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(string(s)); err != nil {
		t.Fatal(err)
	}
	if w := bytes.TrimSuffix(want.Bytes(), []byte("\n")); !bytes.Equal(got, w) {
		t.Fatalf("AppendJSONString(%q) = %s, encoding/json gives %s", s, got, w)
	}

	var decoded, wantDecoded string
	if err := json.Unmarshal(got, &decoded); err != nil {
		t.Fatalf("AppendJSONString(%q) = %s: %v", s, got, err)
	}
	marshaled, err := json.Marshal(string(s))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(marshaled, &wantDecoded); err != nil {
		t.Fatal(err)
	}
	if decoded != wantDecoded {
		t.Fatalf("AppendJSONString(%q) decodes to %q, want %q", s, decoded, wantDecoded)
	}
}

func TestAppendJSONString(t *testing.T) {
	cases := []string{
		"", "vec_add", `say "hi"`, `C:\path`, "<a href='x'>&amp;</a>",
		"tab\there\nnew\rline\b\f", "\x00\x01\x1f\x7f", "héllo wörld", "日本語", "🚀 ok",
		"\xff", "a\xffb", "\xe6\x97", "\xe6\x97\xa5\xe6", "\xed\xa0\x80", "\xc0\x80", "\xf4\x90\x80\x80",
		"line\u2028sep\u2029para", "\u00a0\ufeff\ufffd",
	}
	for c := range 256 {
		cases = append(cases, string([]byte{byte(c)}), "x"+string([]byte{byte(c)})+"y")
	}
	for _, s := range cases {
		checkJSONString(t, []byte(s))
	}
	if got := string(AppendJSONString(nil, []byte("a<b>&\n"))); got != `"a<b>&\n"` {
		t.Errorf("got %s", got)
	}
}

func FuzzAppendJSONString(f *testing.F) {
	f.Add([]byte("vec_add"))
	f.Add([]byte("\"\\\x00\xff\u2028日本"))
	f.Fuzz(checkJSONString)
}

func TestAppendJSONStringDoesNotAllocate(t *testing.T) {
	s := []byte("kernel \"vec_add\"\t\x01\xff 日本 \u2028 <done>")
	buf := AppendJSONString(nil, s)
	if n := testing.AllocsPerRun(100, func() { buf = AppendJSONString(buf[:0], s) }); n != 0 {
		t.Errorf("AppendJSONString allocates %v times", n)
	}
}
