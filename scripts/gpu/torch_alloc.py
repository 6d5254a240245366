#!/usr/bin/env python3
"""A small PyTorch workload for gpuevent_snoop: the caching allocator's
cudaMalloc calls (a few large segments, reused), host<->device copies,
kernel launches, and one deliberately kept tensor. Prints what it did so the
tool's report can be compared with it."""
import sys
import time

import torch

if not torch.cuda.is_available():
    print("torch_alloc: no CUDA device visible to PyTorch", file=sys.stderr)
    sys.exit(1)

dev = torch.device("cuda")
torch.manual_seed(0)
host = torch.randn(1024, 1024)  # 4 MiB
x = host.to(dev)  # H2D copy
w = torch.randn(1024, 1024, device=dev)
for _ in range(20):
    x = torch.relu(x @ w) / 1024.0  # gemm + elementwise launches
big = torch.empty(64 << 20, dtype=torch.uint8, device=dev)  # a 64 MiB segment
big.fill_(1)
s = float(x.sum().item())  # D2H copy
back = x.cpu()  # D2H copy, 4 MiB
del big
torch.cuda.synchronize()
print(
    f"torch_alloc: torch {torch.__version__} cuda {torch.version.cuda}; "
    f"sum={s:.4f}; allocated={torch.cuda.memory_allocated()} reserved={torch.cuda.memory_reserved()}"
)
# The caching allocator keeps its segments until exit: the tool reports them
# as never freed, which is what a leak check of a PyTorch process shows.
time.sleep(0.2)
