"""A small PyTorch training loop whose kernels carry no PTX (PyTorch's own,
cuBLAS's, and with --compile Triton's cubins): launchlate's CUPTI path and its
cost (scripts/gpu/cupti-check.sh).

    torch_train.py [--steps N | --seconds S] [--compile] [--gate FILE] [--report S]

An MLP (1024 -> 4096 -> 1024, GELU, batch 256) trained with AdamW on a fixed
random regression; the same kernels, in the same numbers, every step. After
a warm-up of 20 steps (cuBLAS's and Triton's first calls), runs N steps, or
as many as fit in S seconds. --gate FILE: after the warm-up, print "GATED
pid=PID" and wait (60 s at most) for FILE, so a tool can attach first.
--report S: every S seconds print "RATE t=T steps=N step_ms=X" (that
interval's steps per second and median step) and keep no per-step times,
so a long run's memory stays flat (scripts/gpu/soak-check.sh).
Prints the median step time and "RESULT torch_train ok steps=N
step_ms_median=X loss=Y" when the loss went down.
"""
import argparse
import os
import statistics
import sys
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=0)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--gate", default="")
    ap.add_argument("--report", type=float, default=0)
    a = ap.parse_args()
    if not a.steps and not a.seconds:
        a.steps = 200
    torch.manual_seed(0)
    dev = "cuda"
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(256, 1024, device=dev)
    y = torch.randn(256, 1024, device=dev)

    def loss_fn(out, y):
        return torch.nn.functional.mse_loss(torch.tanh(out) * 1.5, y)

    if a.compile:
        loss_fn = torch.compile(loss_fn)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    first = step().item()
    for _ in range(19):
        step()
    torch.cuda.synchronize()
    if a.gate:
        print(f"GATED pid={os.getpid()}", flush=True)
        for _ in range(30000):
            if os.path.exists(a.gate):
                break
            time.sleep(0.002)
    times, n = [], 0
    start = time.monotonic()
    t_end = start + a.seconds if a.seconds else None
    medians, since, n_since = [], start, 0
    while (a.steps and n < a.steps) or (t_end and time.monotonic() < t_end):
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        n += 1
        now = time.monotonic()
        if a.report and now - since >= a.report:
            m = statistics.median(times) * 1e3
            medians.append(m)
            print(f"RATE t={now - start:.1f} steps={n - n_since} per_s={(n - n_since) / (now - since):.1f} step_ms={m:.4f}", flush=True)
            times, since, n_since = [], now, n
    last = loss.item()
    med = statistics.median(times) * 1e3 if not medians else statistics.median(medians)
    print(f"torch_train: torch {torch.__version__}, {n} steps, median step {med:.3f} ms, loss {first:.4f} -> {last:.4f}")
    ok = last < first
    print(f"RESULT torch_train {'ok' if ok else 'bad'} steps={n} step_ms_median={med:.4f} loss={last:.5f}", flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
