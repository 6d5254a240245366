package jit

// CtxMax is the most ctx a GPU program may read: CUDA's classic limit on a
// kernel's parameters. The verifier's CPU twin gives the program a ctx of
// this size, so every ctx access the kernel's verifier accepts lies below it.
const CtxMax = 4096
