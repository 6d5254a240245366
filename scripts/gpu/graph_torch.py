#!/usr/bin/env python3
"""PyTorch workload whose CUDA graphs are captured before any gpubpf tool
attaches (scripts/gpu/graphs-check.sh).

    python3 graph_torch.py MODE SECONDS

MODE:
  cudagraph  a small MLP (3 Linear layers 1024 wide, ReLU, batch 64,
             float32, inference_mode) captured once with torch.cuda.graph
             after 3 warm-up iterations on a side stream (PyTorch's
             documented recipe), then g.replay() in a loop for SECONDS
             seconds; at the end the static output must equal, bit for
             bit (torch.equal), an eager run on the same static input.
  compile    the same model through torch.compile(mode="reduce-overhead")
             (CUDA graph trees), called in a loop on the same input for
             SECONDS seconds after a few warm-up calls (which compile and
             capture); the last output must match the eager model's
             (torch.allclose, atol=rtol=1e-4).

Lines printed (flushed):
  graph_torch: ready pid=PID mode=MODE   capture/warm-up done, loop begins
  graph_torch: replays=N                 loop iterations, at the end
  RESULT graph_torch ok mode=MODE replays=N        (exit 0)
  RESULT graph_torch FAIL mode=MODE reason=...     (exit 1)
SIGTERM (or SIGINT) ends the loop early; the check still runs.
"""
import os
import signal
import sys
import time

NAME = "graph_torch"
STOP = False


def on_stop(signum, frame):
    global STOP
    STOP = True


def say(msg):
    print(msg, flush=True)


def result(ok, mode, detail=""):
    line = f"RESULT {NAME} {'ok' if ok else 'FAIL'} mode={mode}"
    if detail:
        line += " " + detail
    say(line)
    sys.exit(0 if ok else 1)


def make_model(torch, width=1024):
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(
        nn.Linear(width, width), nn.ReLU(),
        nn.Linear(width, width), nn.ReLU(),
        nn.Linear(width, width),
    ).cuda().eval()


def mismatch(torch, got, want):
    """A short description of how got differs from want."""
    if got.shape != want.shape:
        return f"shape {tuple(got.shape)} vs {tuple(want.shape)}"
    diff = (got.double() - want.double()).abs()
    bad = (got != want)
    nbad = int(bad.sum().item())
    first = ""
    if nbad:
        idx = bad.flatten().nonzero()[0].item()
        first = f" first_index={idx} got={got.flatten()[idx].item()!r} want={want.flatten()[idx].item()!r}"
    nan = int(torch.isnan(got).sum().item())
    return f"differing={nbad}/{got.numel()} max_abs_diff={diff.max().item():.3g} nan={nan}{first}"


def run_cudagraph(torch, seconds, batch=64, width=1024):
    model = make_model(torch, width)
    with torch.inference_mode():
        static_input = torch.randn(batch, width, device="cuda")
        # Warm-up on a side stream, then capture (the recipe of
        # https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs).
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                model(static_input)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_output = model(static_input)
        torch.cuda.synchronize()
        say(f"{NAME}: ready pid={os.getpid()} mode=cudagraph")
        n = 0
        end = time.monotonic() + seconds
        while not STOP and time.monotonic() < end:
            g.replay()
            n += 1
            if n % 64 == 0:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        say(f"{NAME}: replays={n}")
        got = static_output.clone()
        want = model(static_input)
        torch.cuda.synchronize()
        if n == 0:
            result(False, "cudagraph", "reason=no_replays replays=0")
        if not torch.equal(got, want):
            result(False, "cudagraph", f"reason=output_differs replays={n} {mismatch(torch, got, want)}")
        result(True, "cudagraph", f"replays={n}")


def run_compile(torch, seconds, batch=64, width=1024, warmup=5):
    model = make_model(torch, width)
    cmodel = torch.compile(model, mode="reduce-overhead")
    mark = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)
    with torch.inference_mode():
        x = torch.randn(batch, width, device="cuda")
        # The first calls compile, warm up and record the CUDA graph.
        for _ in range(warmup):
            if mark:
                mark()
            out = cmodel(x)
        torch.cuda.synchronize()
        say(f"{NAME}: ready pid={os.getpid()} mode=compile")
        n = 0
        last = None
        end = time.monotonic() + seconds
        while not STOP and time.monotonic() < end:
            if mark:
                mark()
            out = cmodel(x)
            n += 1
            if n % 64 == 0:
                torch.cuda.synchronize()
        # The output of a cudagraph-trees replay is overwritten by the
        # next call: take a copy before the eager run.
        last = out.clone()
        torch.cuda.synchronize()
        say(f"{NAME}: replays={n}")
        want = model(x)
        torch.cuda.synchronize()
        if n == 0:
            result(False, "compile", "reason=no_replays replays=0")
        if not torch.allclose(last, want, atol=1e-4, rtol=1e-4):
            result(False, "compile", f"reason=output_differs replays={n} {mismatch(torch, last, want)}")
        result(True, "compile", f"replays={n}")


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("cudagraph", "compile"):
        print(f"usage: {sys.argv[0]} cudagraph|compile SECONDS", file=sys.stderr)
        sys.exit(2)
    mode = sys.argv[1]
    try:
        seconds = float(sys.argv[2])
    except ValueError:
        print(f"{NAME}: bad SECONDS {sys.argv[2]!r}", file=sys.stderr)
        sys.exit(2)
    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        result(False, mode, f"reason=no_torch error={type(e).__name__}")
    if not torch.cuda.is_available():
        result(False, mode, "reason=no_cuda")
    say(f"{NAME}: torch {torch.__version__} cuda {torch.version.cuda} on {torch.cuda.get_device_name(0)}")
    try:
        if mode == "cudagraph":
            run_cudagraph(torch, seconds)
        else:
            run_compile(torch, seconds)
    except SystemExit:
        raise
    except Exception as e:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        msg = str(e).splitlines()[0][:200] if str(e) else ""
        result(False, mode, f"reason=exception error={type(e).__name__} msg={msg!r}")


if __name__ == "__main__":
    main()
