// Package archivebomb builds the archives an attacker sends to make an
// import unpack far more than it uploads: a file of gigabytes of zeros in a
// few megabytes, or more than a million entries. The server's tests and the
// abuse suite send them. Nothing here compresses the gigabytes: a piece
// compressed on its own and flushed is a run of deflate blocks that ends on
// a byte boundary and refers to nothing before it, so its compressed form
// is repeated, and only checksums are computed over what it stands for.
package archivebomb

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"bytes"
	"compress/flate"
	"encoding/binary"
	"hash/crc32"
	"io"
	"strconv"
	"strings"
)

// deflated is a raw deflate stream of repeated pieces, with the checksum
// and length of what it inflates to.
type deflated struct {
	out  bytes.Buffer
	crc  uint32
	size int64
}

// add appends plain, times times.
func (d *deflated) add(plain []byte, times int) {
	var piece bytes.Buffer
	w, _ := flate.NewWriter(&piece, flate.BestCompression) // fails only on a bad level
	w.Write(plain)
	w.Flush()
	for range times {
		d.out.Write(piece.Bytes())
		d.crc = crc32.Update(d.crc, crc32.IEEETable, plain)
	}
	d.size += int64(len(plain)) * int64(times)
}

// stream ends the stream with an empty final block and returns it.
func (d *deflated) stream() []byte {
	w, _ := flate.NewWriter(&d.out, flate.BestCompression)
	w.Close()
	return d.out.Bytes()
}

// gzipped is the stream in gzip's framing.
func (d *deflated) gzipped() []byte {
	var out bytes.Buffer
	out.Write([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff})
	out.Write(d.stream())
	binary.Write(&out, binary.LittleEndian, d.crc)
	binary.Write(&out, binary.LittleEndian, uint32(d.size))
	return out.Bytes()
}

// ZipOfZeros is a zip of one file, zeros.bin, of mib MiB of zeros: about
// a thousandth of that in size. Past 4 GiB it carries zip64 sizes.
func ZipOfZeros(mib int) ([]byte, error) {
	var d deflated
	d.add(make([]byte, 1<<20), mib)
	stream := d.stream()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.CreateRaw(&zip.FileHeader{Name: "zeros.bin", Method: zip.Deflate, CRC32: d.crc,
		CompressedSize64: uint64(len(stream)), UncompressedSize64: uint64(d.size)})
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(stream); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// TarGzOfZeros is a .tar.gz of one file, zeros.bin, of mib MiB of zeros.
func TarGzOfZeros(mib int) ([]byte, error) {
	head, err := tarHeader(&tar.Header{Name: "zeros.bin", Mode: 0o644, Size: int64(mib) << 20, Typeflag: tar.TypeReg})
	if err != nil {
		return nil, err
	}
	var d deflated
	d.add(head, 1)
	d.add(make([]byte, 1<<20), mib)
	d.add(make([]byte, 1024), 1) // the tar's end
	return d.gzipped(), nil
}

// TarGzOfEmptyFiles is a .tar.gz of thousands × 1,000 empty files, all
// named empty.txt (a tar may name a file twice; the import refuses that
// later than it counts).
func TarGzOfEmptyFiles(thousands int) ([]byte, error) {
	head, err := tarHeader(&tar.Header{Name: "empty.txt", Mode: 0o644, Typeflag: tar.TypeReg})
	if err != nil {
		return nil, err
	}
	var d deflated
	d.add(bytes.Repeat(head, 1000), thousands)
	d.add(make([]byte, 1024), 1)
	return d.gzipped(), nil
}

// tarHeader is the 512-byte block tar writes for h; its content follows.
func tarHeader(h *tar.Header) ([]byte, error) {
	var b bytes.Buffer
	if err := tar.NewWriter(&b).WriteHeader(h); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// WriteZipOfEmptyFiles writes a zip of n empty files, named by four
// characters each (n at most 36⁴), with its zip64 end records, record by
// record: 84 bytes an entry, and nothing of it held in memory.
func WriteZipOfEmptyFiles(out io.Writer, n int) error {
	w := bufio.NewWriterSize(out, 1<<20)
	le := binary.LittleEndian
	name := func(i int) []byte {
		s := strconv.FormatInt(int64(i), 36)
		return []byte(strings.Repeat("0", 4-len(s)) + s)
	}
	const local, central = 30 + 4, 46 + 4
	for i := range n {
		var h [30]byte
		le.PutUint32(h[0:], 0x04034b50)
		le.PutUint16(h[4:], 20)
		le.PutUint16(h[26:], 4)
		w.Write(h[:])
		w.Write(name(i))
	}
	dirAt := uint64(n * local)
	for i := range n {
		var h [46]byte
		le.PutUint32(h[0:], 0x02014b50)
		le.PutUint16(h[4:], 3<<8|20) // made on Unix
		le.PutUint16(h[6:], 20)
		le.PutUint16(h[28:], 4)
		le.PutUint32(h[38:], 0o100644<<16)
		le.PutUint32(h[42:], uint32(i*local))
		w.Write(h[:])
		w.Write(name(i))
	}
	dirSize := uint64(n * central)
	var end64 [56]byte
	le.PutUint32(end64[0:], 0x06064b50)
	le.PutUint64(end64[4:], 44)
	le.PutUint16(end64[12:], 45)
	le.PutUint16(end64[14:], 45)
	le.PutUint64(end64[24:], uint64(n))
	le.PutUint64(end64[32:], uint64(n))
	le.PutUint64(end64[40:], dirSize)
	le.PutUint64(end64[48:], dirAt)
	w.Write(end64[:])
	var loc [20]byte
	le.PutUint32(loc[0:], 0x07064b50)
	le.PutUint64(loc[8:], dirAt+dirSize)
	le.PutUint32(loc[16:], 1)
	w.Write(loc[:])
	var end [22]byte
	le.PutUint32(end[0:], 0x06054b50)
	le.PutUint16(end[8:], 0xffff)
	le.PutUint16(end[10:], 0xffff)
	le.PutUint32(end[12:], uint32(dirSize))
	le.PutUint32(end[16:], uint32(dirAt))
	w.Write(end[:])
	return w.Flush()
}
