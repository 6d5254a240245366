package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/internal/testenv"
)

// startPrometheus runs a real Prometheus server (Debian's, .ci/run unpacks
// it) scraping target every 100 ms, and returns its base URL once it is
// ready. It stops with the test.
func startPrometheus(t *testing.T, target string) string {
	t.Helper()
	bin := testenv.Tool(t, "prometheus")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`global:
  scrape_interval: 100ms
  scrape_timeout: 90ms
scrape_configs:
  - job_name: gpubpf
    static_configs:
      - targets: ['%s']
`, target)), 0o644)
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	base := "http://" + addr
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if r, err := http.Get(base + "/-/ready"); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus did not become ready in 30 s:\n%s", logs.String())
		}
	}
}

// promQuery is the value of PromQL query q at the server now, as the HTTP
// API returns it ("" while the vector is empty).
func promQuery(t *testing.T, base, q string) string {
	t.Helper()
	r, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var res struct {
		Status string
		Error  string
		Data   struct {
			Result []struct {
				Value [2]any
			}
		}
	}
	if err := json.NewDecoder(r.Body).Decode(&res); err != nil || res.Status != "success" {
		t.Fatalf("query %s: %v %s %s", q, err, res.Status, res.Error)
	}
	if len(res.Data.Result) != 1 {
		return ""
	}
	v, _ := res.Data.Result[0].Value[1].(string)
	return v
}

// waitQuery waits until query q gives want (at most 30 s).
func waitQuery(t *testing.T, base, q, want string) {
	t.Helper()
	got := ""
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got = promQuery(t, base, q); got == want {
			return
		}
	}
	t.Errorf("Prometheus: %s = %q, want %s (the tool's own number)", q, got, want)
}
