package payloads

import (
	"crypto/sha256"
	"encoding/binary"
)

// Content-defined chunking, as rsync's and restic's stores do it: a rolling
// "gear" hash over the bytes cuts a chunk where its low bits are zero, so
// a cut depends only on the bytes just before it. Bytes that two payloads
// share (a tool output that every later model call of a turn carries again)
// are cut at the same places in both and stored once, wherever they sit.
// No library on the module proxy fits a store this small; this is FastCDC's
// plain form without its normalization.
//
// Chunks are small (2.5 KiB on average) because what a store saves is the
// inside of the content that payloads share: the chunks around where a
// shared stretch begins and ends differ from payload to payload (a tool's
// result payload, then each model call that carries it, then the turn's
// result), and small chunks make that edge cheap.
const (
	minChunk = 512
	maxChunk = 32 << 10
	// chunkMask has 11 bits: a cut every 2 KiB on average past minChunk.
	chunkMask = 1<<11 - 1
)

// gear is the rolling hash's table: fixed, so cuts never move between
// builds (a moved cut would only cost space, never correctness).
var gear = func() (g [256]uint64) {
	for i := range g {
		sum := sha256.Sum256([]byte{byte(i), 't', 'g'})
		g[i] = binary.LittleEndian.Uint64(sum[:8])
	}
	return g
}()

// cutChunks cuts b into chunks of minChunk to maxChunk bytes; they
// concatenate to b.
func cutChunks(b []byte) [][]byte {
	var chunks [][]byte
	for len(b) > 0 {
		n := cutPoint(b)
		chunks = append(chunks, b[:n])
		b = b[n:]
	}
	return chunks
}

// cutPoint is the length of the next chunk of b.
func cutPoint(b []byte) int {
	if len(b) <= minChunk {
		return len(b)
	}
	end := min(len(b), maxChunk)
	// The hash holds the last 64 bytes (each shifts out after 64 steps),
	// so starting it 64 bytes before the first possible cut is the same as
	// starting it at the beginning.
	var h uint64
	for i := minChunk - 64; i < end; i++ {
		h = h<<1 + gear[b[i]]
		if i >= minChunk && h&chunkMask == 0 {
			return i + 1
		}
	}
	return end
}
