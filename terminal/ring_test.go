package terminal

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestRingKeepsNewestBytesByOffset writes random amounts, some larger than
// the ring, and reads back random ranges against the whole stream.
func TestRingKeepsNewestBytesByOffset(t *testing.T) {
	for _, max := range []int{1, 7, 100, 4096, 10000} {
		rnd := rand.New(rand.NewPCG(uint64(max), 2))
		r := newRing(max)
		var all []byte
		for range 2000 {
			p := make([]byte, rnd.IntN(max*3/2+2))
			for i := range p {
				p[i] = byte(rnd.Uint32())
			}
			r.write(p)
			all = append(all, p...)
			if r.end != uint64(len(all)) {
				t.Fatalf("max %d: end %d, wrote %d", max, r.end, len(all))
			}
			if want := uint64(len(all) - min(len(all), max)); r.start() != want {
				t.Fatalf("max %d: start %d, want %d", max, r.start(), want)
			}
			if len(r.buf) > max {
				t.Fatalf("max %d: buffer grew to %d", max, len(r.buf))
			}
			from := r.start() + uint64(rnd.IntN(int(r.end-r.start())+1))
			dst := make([]byte, rnd.IntN(max+1))
			n := r.read(from, dst)
			if want := all[from:min(uint64(len(all)), from+uint64(len(dst)))]; !bytes.Equal(dst[:n], want) {
				t.Fatalf("max %d: read %d bytes at %d: got %x, want %x", max, len(dst), from, dst[:n], want)
			}
		}
	}
}

// TestRingGrowsOnlyAsNeeded: an idle terminal does not hold a full ring.
func TestRingGrowsOnlyAsNeeded(t *testing.T) {
	r := newRing(1 << 20)
	r.write([]byte("$ "))
	if len(r.buf) != minRingAlloc {
		t.Fatalf("after a prompt the ring holds %d bytes, want %d", len(r.buf), minRingAlloc)
	}
	r.write(make([]byte, 5000))
	if len(r.buf) != 2*minRingAlloc {
		t.Fatalf("after 5002 bytes the ring holds %d bytes, want %d", len(r.buf), 2*minRingAlloc)
	}
}
