# gpubpf build. Go binaries are static (CGO_ENABLED=0) so that the same
# files run on the GPU machine, which has no Go toolchain.

GO       ?= go
# One binary (tools/gpubpf); the tools are links to it that it runs under
# their own names (busybox style), and its subcommands too.
TOOLS    := gpuevent_snoop kernel_trace kernelretsnoop launchlate threadhist
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X github.com/gpubpf/gpubpf/pkg/toolkit.Version=$(VERSION)
GOBUILD  := CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)'
# Where Debian's nvidia-cuda-toolkit is unpacked (ptxas, cuobjdump for tests).
export GPUBPF_CUDA_BIN ?= /opt/cudadeb/root/usr/bin

.PHONY: all tools embed-agent agent samples generate check-generated man check-man fmt vet test test-unit \
        test-gpu bench bench-cpu bench-host demo gpu-bundle clean install check-install

all: agent tools samples

tools: embed-agent bin/gpubpf
	@for t in $(TOOLS); do ln -sfn gpubpf bin/$$t; done

# Tools carry the agent inside them (go:embed) when it has been built.
embed-agent: agent
	@if [ -f bin/libgpubpf-agent.so ]; then cp bin/libgpubpf-agent.so pkg/runtime/agentlib/embedded/; fi

# Without Go (the GPU machine) the binaries carried from a build machine are used.
HAVE_GO  := $(shell command -v $(GO) 2>/dev/null)
bin/gpubpf: FORCE
	@mkdir -p bin
ifneq ($(HAVE_GO),)
	$(GOBUILD) -o $@ ./tools/gpubpf
else
	@test -x $@ || { echo "$@: no Go toolchain here and no prebuilt binary: run 'make gpu-bundle' on a build machine and carry bin/"; exit 1; }
	@echo "$@: no Go here, using the prebuilt binary"
endif

FORCE:

# make install [PREFIX=/usr/local] [DESTDIR=...]: gpubpf (the agent
# embedded) and a link to it per tool into PREFIX/bin, and the agent into
# PREFIX/lib/gpubpf, where the tools look first (relative to themselves, so
# DESTDIR works); executable, as gpubpf run --direct runs it as its host
# process.
PREFIX  ?= /usr/local
install: tools
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/gpubpf
	install -m 0755 bin/gpubpf $(DESTDIR)$(PREFIX)/bin/
	for t in $(TOOLS); do ln -sfn gpubpf $(DESTDIR)$(PREFIX)/bin/$$t; done
	@if [ -f bin/libgpubpf-agent.so ]; then install -m 0755 bin/libgpubpf-agent.so $(DESTDIR)$(PREFIX)/lib/gpubpf/; fi
	install -d $(DESTDIR)$(PREFIX)/share/man/man8 $(DESTDIR)$(PREFIX)/share/bash-completion/completions \
		$(DESTDIR)$(PREFIX)/share/zsh/site-functions $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	install -m 0644 man/*.8 $(DESTDIR)$(PREFIX)/share/man/man8/
	bin/gpubpf completion bash >$(DESTDIR)$(PREFIX)/share/bash-completion/completions/gpubpf
	bin/gpubpf completion zsh >$(DESTDIR)$(PREFIX)/share/zsh/site-functions/_gpubpf
	bin/gpubpf completion fish >$(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/gpubpf.fish
	for t in $(TOOLS); do ln -sfn gpubpf $(DESTDIR)$(PREFIX)/share/bash-completion/completions/$$t; \
		ln -sfn gpubpf.fish $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/$$t.fish; done

# What a fresh machine gets from make install: every tool answers --help
# under its own name and as a subcommand, finds its agent from there, and
# all of it fits INSTALL_BUDGET bytes. The budget: the 30 MB issue 57 set
# against 125 MB of six binaries (Debian's bpftrace is 3.9 MB, bpfcc-tools
# 2.8 MB, but they lean on a system libbpf, LLVM and Python); on 2026-11-29
# the install was about 24.5 MB (gpubpf 23.0 MB stripped, of which the
# embedded agent 0.65 MB, and the agent again in lib). Past it, look at what
# grew with `go tool nm -size -sort size bin/gpubpf | head`.
INSTALL_BUDGET ?= 30000000
check-install:
	@d=$$(mktemp -d) && $(MAKE) --no-print-directory install DESTDIR=$$d >/dev/null && \
	for t in $(TOOLS); do $$d$(PREFIX)/bin/$$t --help >/dev/null && $$d$(PREFIX)/bin/gpubpf $$t --help >/dev/null || \
		{ echo "check-install: $$t --help failed"; exit 1; }; done && \
	p=$$($$d$(PREFIX)/bin/gpubpf agent-path) && case "$$p" in $$d$(PREFIX)/*) ;; *) echo "check-install: gpubpf agent-path gave $$p, not the installed agent"; exit 1;; esac && \
	for t in gpubpf $(TOOLS); do [ -s $$d$(PREFIX)/share/man/man8/$$t.8 ] && [ -s $$d$(PREFIX)/share/bash-completion/completions/$$t ] || \
		{ echo "check-install: no man page or bash completion for $$t"; exit 1; }; done && \
	bash -n $$d$(PREFIX)/share/bash-completion/completions/gpubpf && \
	size=$$(du -sb --apparent-size $$d | cut -f1) && \
	if [ "$$size" -gt $(INSTALL_BUDGET) ]; then echo "check-install: make install takes $$size bytes, past the budget of $(INSTALL_BUDGET) (see the Makefile)"; exit 1; fi && \
	echo "check-install: gpubpf and $(words $(TOOLS)) tool links in $$d$(PREFIX)/bin, agent $$p, $$size bytes in all (budget $(INSTALL_BUDGET))" && rm -rf $$d

# The in-process agent (C, gcc only). Skipped with a message until its
# sources exist.
agent:
	@if [ -f pkg/runtime/agent/Makefile ]; then \
		$(MAKE) -C pkg/runtime/agent AGENT_BIN_DIR=$(CURDIR)/bin; \
	else echo "agent: pkg/runtime/agent not present yet, skipping"; fi

# CUDA samples need nvcc; samples/Makefile says so and skips without it.
samples:
	@if [ -f samples/Makefile ]; then $(MAKE) -C samples; \
	else echo "samples: not present yet, skipping"; fi

# bpf2go: regenerate the committed .go/.o files from bpf/*.c (needs clang).
generate:
	$(GO) generate ./...

# CI: the committed generated files must match what `make generate` makes.
check-generated: generate
	@if [ -n "$$(git status --porcelain -- '*_bpfel.go' '*_bpfel.o' '*_bpfeb.go' '*_bpfeb.o' '*.bpf.o')" ]; then \
		git status --porcelain -- '*_bpfel.go' '*_bpfel.o' '*_bpfeb.go' '*_bpfeb.o' '*.bpf.o'; \
		echo "generated bpf2go files are stale: run 'make generate' and commit them"; exit 1; \
	fi
	@echo "generated files are current"

# The man pages (man/, section 8) are made from the commands' own flag
# definitions and committed; CI checks they are current.
man:
	$(GO) run ./tools/gpubpf man man

check-man:
	@d=$$(mktemp -d) && $(GO) run ./tools/gpubpf man $$d && \
	if ! diff -r man $$d >/dev/null; then diff -r man $$d | head -20; rm -rf $$d; \
		echo "man pages are stale: run 'make man' and commit man/"; exit 1; fi; rm -rf $$d; echo "man pages are current"

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then \
		echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	cd internal/otelcol && $(GO) vet ./...

# Unit tests and root-only kernel eBPF tests (CI runs as root); then the
# performance table's renderer, table-bench.sh's plumbing and the launch-rate
# statistics (no GPU).
test: fmt vet agent check-install check-man
	$(GO) test -count=1 ./...
	PYTHONDONTWRITEBYTECODE=1 python3 -m unittest scripts/gpu/test_bench_table.py scripts/gpu/test_launchrate_stats.py scripts/gpu/test_soak_util.py

# On the GPU machine: build samples and agent, run every GPU test and
# benchmark, print a table last. Go binaries come prebuilt (make gpu-bundle).
test-gpu:
	@bash scripts/gpu-check.sh

# make bench: the Go benchmarks where there is Go, then on a GPU machine
# every scripts/gpu/*-bench.sh, the performance table (table-bench.sh) among
# them: bench/results/README.md. The GPU machine has no Go: the host side of
# the table comes from `make bench-host` run here and committed.
bench:
ifneq ($(HAVE_GO),)
	@$(MAKE) --no-print-directory bench-cpu bench-host
endif
	@bash scripts/gpu-check.sh --bench-only

bench-cpu:
	$(GO) test -run '^$$' -bench . -benchtime 200x ./pkg/... ./tools/...

# The host side of the performance table: records decoded per second on
# one core (-cpu 1, 1 s per benchmark, three runs each) by each record
# decoder that has a Go benchmark, into bench/results/host-decode-DATE.txt,
# which scripts/gpu/bench_table.py reads on the GPU machine.
HOST_BENCH := Scan$$|TraceEvent$$|DecodePrint
HOST_BENCH_PKGS := ./pkg/runtime/gpumap ./pkg/btffmt ./tools/gpuevent_snoop
bench-host:
	@mkdir -p bench/results
	@f=bench/results/host-decode-$$(date -u +%Y-%m-%d).txt; \
	{ echo "# make bench-host, $$(date -u +%Y-%m-%dT%H:%MZ), gpubpf $(VERSION), $$($(GO) version | cut -d' ' -f3-)"; \
	  echo "# CPU: $$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $$(nproc) CPUs; go test -bench '$(HOST_BENCH)' -benchtime 1s -count 3 -cpu 1"; \
	  $(GO) test -run '^$$' -bench '$(HOST_BENCH)' -benchtime 1s -count 3 -cpu 1 $(HOST_BENCH_PKGS); } >$$f.tmp && \
	mv $$f.tmp $$f && echo "bench-host: wrote $$f" || { rm -f $$f.tmp; echo "bench-host: go test -bench failed"; exit 1; }

# Everything the GPU machine needs that only this machine can build.
gpu-bundle:
	@bash scripts/gpu-bundle.sh

demo: all
	@bash scripts/demo.sh

clean:
	rm -rf bin .gpu
	@if [ -f samples/Makefile ]; then $(MAKE) -C samples clean; fi
