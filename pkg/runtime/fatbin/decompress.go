package fatbin

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// zstdDecoder is shared: creating a decoder allocates its window buffers.
// DecodeAll is safe for concurrent use. The memory cap bounds the window a
// frame may ask for, so a frame header cannot make us allocate gigabytes.
var zstdDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(uint64(MaxPayload)), zstd.WithDecoderMaxWindow(uint64(MaxPayload)))
})

// DecompressZstd decodes a zstd frame (CUDA 13's PTX payloads). want is the
// size recorded in the element header (0 if unknown); the output is capped
// at MaxPayload and must match want when want is set.
func DecompressZstd(src []byte, want uint64) ([]byte, error) {
	if want > uint64(MaxPayload) {
		return nil, fmt.Errorf("zstd: declared size %d exceeds the %d-byte limit", want, MaxPayload)
	}
	if len(src) < 4 || !bytes.Equal(src[:4], []byte{0x28, 0xb5, 0x2f, 0xfd}) {
		return nil, fmt.Errorf("zstd: no frame magic at payload offset 0")
	}
	d, err := zstdDecoder()
	if err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	out, err := d.DecodeAll(src, make([]byte, 0, int(want)))
	if err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	if want != 0 && uint64(len(out)) != want {
		return nil, fmt.Errorf("zstd: decoded %d bytes, header says %d", len(out), want)
	}
	return out, nil
}

// DecompressLZ4 decodes the LZ4-style block codec of CUDA <= 12 fatbins
// (flag 0x2000): sequences of a token (high nibble literal length, low
// nibble match length - 4, each extended by 255-continued bytes), the
// literals, then a 2-byte little-endian back offset. want is the
// decompressed size from the element header; the output never exceeds it.
func DecompressLZ4(src []byte, want uint64) ([]byte, error) {
	if want == 0 || want > uint64(MaxPayload) {
		return nil, fmt.Errorf("lz4: declared size %d out of range (1..%d)", want, MaxPayload)
	}
	out := make([]byte, 0, int(want))
	ip := 0
	for ip < len(src) {
		tok := src[ip]
		ip++
		lit := int(tok >> 4)
		if lit == 15 {
			for {
				if ip >= len(src) {
					return nil, fmt.Errorf("lz4: truncated literal length at payload offset %#x", ip)
				}
				c := src[ip]
				ip++
				lit += int(c)
				if c != 0xff {
					break
				}
			}
		}
		if lit > len(src)-ip {
			return nil, fmt.Errorf("lz4: %d literals at payload offset %#x overrun the input (%d bytes left)", lit, ip, len(src)-ip)
		}
		if lit > cap(out)-len(out) {
			return nil, fmt.Errorf("lz4: output at payload offset %#x exceeds the declared %d bytes", ip, want)
		}
		out = append(out, src[ip:ip+lit]...)
		ip += lit
		if ip >= len(src) || uint64(len(out)) >= want {
			break // the last sequence has literals only
		}
		if ip+2 > len(src) {
			return nil, fmt.Errorf("lz4: truncated match offset at payload offset %#x", ip)
		}
		back := int(src[ip]) | int(src[ip+1])<<8
		ip += 2
		mlen := int(tok&15) + 4
		if tok&15 == 15 {
			for {
				if ip >= len(src) {
					return nil, fmt.Errorf("lz4: truncated match length at payload offset %#x", ip)
				}
				c := src[ip]
				ip++
				mlen += int(c)
				if c != 0xff {
					break
				}
			}
		}
		if back == 0 || back > len(out) {
			return nil, fmt.Errorf("lz4: match offset %d at payload offset %#x points before the output start (%d bytes written)", back, ip, len(out))
		}
		if mlen > cap(out)-len(out) {
			return nil, fmt.Errorf("lz4: match at payload offset %#x exceeds the declared %d bytes", ip, want)
		}
		// A match may overlap the bytes it produces (back < mlen): it
		// then repeats its first back bytes, copied in runs that double
		// (byte by byte, this loop was most of a -p index's time).
		d := len(out)
		out = out[:d+mlen]
		for done := 0; done < mlen; {
			done += copy(out[d+done:], out[d-back:d+done])
		}
	}
	if uint64(len(out)) != want {
		return nil, fmt.Errorf("lz4: decoded %d bytes, header says %d", len(out), want)
	}
	return out, nil
}
