"""Writes the PTX Triton emits for two kernels (an elementwise add and a
tl.dot matmul, which uses mma/ldmatrix/cp.async) into DIR, as parser and
instrumentation fixtures. Needs a GPU and Triton: run on the GPU machine.

    python3 triton_ptx.py DIR
"""
import os
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


def main():
    d = sys.argv[1]
    os.makedirs(d, exist_ok=True)
    x = torch.rand(4096, device="cuda")
    y = torch.rand_like(x)
    o = torch.empty_like(x)
    k = add_kernel[(4,)](x, y, o, 4096, BLOCK=1024)
    torch.testing.assert_close(o, x + y)
    open(os.path.join(d, "triton_add.ptx"), "w").write(k.asm["ptx"])
    a = torch.randn(128, 128, device="cuda", dtype=torch.float16)
    b = torch.randn(128, 128, device="cuda", dtype=torch.float16)
    c = torch.empty(128, 128, device="cuda", dtype=torch.float32)
    k = matmul_kernel[(2, 2)](a, b, c, 128, 128, 128, BM=64, BN=64, BK=32)
    open(os.path.join(d, "triton_matmul.ptx"), "w").write(k.asm["ptx"])
    print("triton", triton.__version__, "PTX written to", d)


if __name__ == "__main__":
    main()
