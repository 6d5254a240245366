package agentclient

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpubpf/gpubpf/pkg/procmaps"
)

// A process in a container has its own view: the agent names its socket
// after the PID it sees (its PID namespace's), puts it in the socket
// directory of its mount namespace (its environment's
// GPUBPF_AGENT_SOCKET_DIR, else DefaultDir), and its abstract fallback
// lives in its network namespace. nsDial reaches the agent of host PID pid
// there: through /proc/PID/root, and by dialling from inside its network
// namespace. It returns nil, nil when pid shares every namespace with the
// tool (the plain dial already looked there).

// nsPID is pid as the process sees itself: the last of NSpid in
// /proc/PID/status (pid itself without PID namespaces).
func nsPID(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return pid
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				break
			}
			if n, err := strconv.Atoi(f[len(f)-1]); err == nil {
				return n
			}
		}
	}
	return pid
}

// processSocketDir is the agent's socket directory in pid's environment.
func processSocketDir(pid int) string {
	if d := procmaps.Environ(pid)["GPUBPF_AGENT_SOCKET_DIR"]; d != "" {
		return d
	}
	return DefaultDir
}

// nsDial tries the socket of pid's agent as the process itself sees it.
func nsDial(pid int, timeout time.Duration) (*net.UnixConn, string, error) {
	npid := nsPID(pid)
	tried := false
	var last error
	if !procmaps.SameNamespace(pid, "mnt") || npid != pid {
		tried = true
		p := fmt.Sprintf("/proc/%d/root%s", pid, filepath.Join(processSocketDir(pid), strconv.Itoa(npid)+".sock"))
		uc, err := dial(p, timeout)
		if err == nil {
			return uc, p, nil
		}
		last = err
	}
	if !procmaps.SameNamespace(pid, "net") || npid != pid {
		tried = true
		name := abstractName(npid)
		uc, err := dialInNetns(pid, name, timeout)
		if err == nil {
			return uc, name + " (in the process's network namespace)", nil
		}
		last = err
	}
	if !tried {
		return nil, "", nil
	}
	return nil, "", last
}

// dialInNetns dials the abstract socket name from inside pid's network
// namespace: one OS thread enters it for the dial and comes back; the
// connection keeps working from anywhere (needs CAP_SYS_ADMIN).
func dialInNetns(pid int, name string, timeout time.Duration) (*net.UnixConn, error) {
	if procmaps.SameNamespace(pid, "net") {
		return dial(name, timeout)
	}
	target, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return nil, err
	}
	defer target.Close()
	type res struct {
		uc  *net.UnixConn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread()
		// A thread that cannot come back is never given back to Go
		// (ending the goroutine locked ends the thread).
		home, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			ch <- res{nil, err}
			return
		}
		defer home.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- res{nil, fmt.Errorf("entering the network namespace of process %d: %w", pid, err)}
			return
		}
		uc, derr := dial(name, timeout)
		if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- res{uc, derr}
	}()
	r := <-ch
	return r.uc, r.err
}
