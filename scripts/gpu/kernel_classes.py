"""Kernel time by class, for the sanitizer path's cost (docs/sanitizer.md):
a cuBLAS GEMM, an ATen elementwise op and a reduction, each timed with CUDA
events over ITERS launches after a warm-up. Run it untraced and under a tool
in the same invocation; the ratio is the cost.

    kernel_classes.py [ITERS]

Prints "CLASS name=... us=..." per class and "RESULT kernel_classes ok".
"""
import sys

import torch


def timed(fn, iters):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) * 1e3 / iters


def main():
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    torch.manual_seed(0)
    x = torch.randn(4096, 4096, device="cuda")
    y = torch.randn(4096, 4096, device="cuda")
    v = torch.randn(1 << 24, device="cuda")
    w = torch.randn(1 << 24, device="cuda")
    out = torch.empty_like(v)
    classes = [
        ("gemm_4096", lambda: torch.mm(x, y)),
        ("elementwise_16M", lambda: torch.add(v, w, out=out)),
        ("reduction_16M", lambda: v.sum()),
    ]
    for name, fn in classes:
        print(f"CLASS name={name} us={timed(fn, iters):.2f}", flush=True)
    print("RESULT kernel_classes ok", flush=True)


if __name__ == "__main__":
    main()
