//go:build tools

// Package deps pins the libraries of the design card in go.mod before the
// code that uses them lands, so parallel work never races on go.mod.
package deps

import (
	_ "github.com/HdrHistogram/hdrhistogram-go"
	_ "github.com/cilium/ebpf"
	_ "github.com/cilium/ebpf/link"
	_ "github.com/cilium/ebpf/ringbuf"
	_ "github.com/ianlancetaylor/demangle"
	_ "github.com/klauspost/compress/zstd"
	_ "github.com/olekukonko/tablewriter"
	_ "github.com/urfave/cli/v2"
	_ "golang.org/x/sys/unix"
)
