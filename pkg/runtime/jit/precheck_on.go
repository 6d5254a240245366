//go:build ringprecheck

package jit

const ringPrecheck = true
