//go:build tools

package deps
import (
 _ "github.com/cilium/ebpf"
 _ "github.com/cilium/ebpf/link"
 _ "github.com/cilium/ebpf/ringbuf"
 _ "github.com/urfave/cli/v2"
 _ "github.com/olekukonko/tablewriter"
 _ "github.com/HdrHistogram/hdrhistogram-go"
 _ "github.com/klauspost/compress/zstd"
 _ "github.com/ianlancetaylor/demangle"
 _ "golang.org/x/sys/unix"
)

