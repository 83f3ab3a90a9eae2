package code

import (
	"bufio"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"

	"atelier/fault"
)

// A zip is read here rather than through archive/zip, whose NewReader
// loads the whole central directory (every record, however many the end
// record claims) before anything can be counted: 1.2 million empty entries
// cost it some 180 MB of heap. Here the end record is read first, an
// archive that declares more entries than an import takes is refused
// before any record is read, and the directory is then read record by
// record through a small buffer, each one counted (entries, names,
// declared sizes) as it is read. What is kept of a record is its entry
// (name, kind, size) and where its data lies; a record's extra field and
// comment are never kept.

// Signatures and fixed sizes of the zip records read (APPNOTE.TXT 4.3).
const (
	zipLocalSig     = 0x04034b50
	zipDirSig       = 0x02014b50
	zipEndSig       = 0x06054b50
	zip64EndSig     = 0x06064b50
	zip64LocatorSig = 0x07064b50

	zipLocalLen     = 30
	zipDirLen       = 46
	zipEndLen       = 22
	zip64EndLen     = 56
	zip64LocatorLen = 20
	zipMaxComment   = 1<<16 - 1

	zip64ExtraID = 0x0001

	// Who made the archive, from the high byte of "version made by":
	// which of the external attributes' halves holds the mode.
	zipMadeByFAT   = 0
	zipMadeByUnix  = 3
	zipMadeByNTFS  = 11
	zipMadeByVFAT  = 14
	zipMadeByMacOS = 19

	zipEncrypted = 0x1 // general purpose flag bit 0
	zipStored    = 0
	zipDeflated  = 8
)

// zipMember is where a zip entry's data lies and how it is stored.
type zipMember struct {
	header int64 // offset of its local header
	packed int64 // compressed size
	crc    uint32
	method uint16
}

// zipEnd is what the end of central directory record (or its zip64 form)
// says of the directory.
type zipEnd struct {
	entries uint64
	dirSize uint64
	dirAt   uint64
	// endAt is where the end records begin: the directory lies before.
	endAt int64
}

// readZip reads a zip's central directory record by record, counting each
// entry against x as it comes, and the text of its links.
func readZip(r io.ReaderAt, size int64, x *expansion) (*archive, error) {
	end, err := readZipEnd(r, size)
	if err != nil {
		return nil, err
	}
	// An honest end record tells the count before a single record is
	// read; a lying one is caught below, record by record.
	if end.entries > maxArchiveEntries {
		return nil, x.tooManyEntries()
	}
	if end.dirAt > uint64(end.endAt) || end.dirSize > uint64(end.endAt)-end.dirAt {
		return nil, fault.Detailf(ErrBadArchive, ": the zip's directory is not where its end record says")
	}
	dir := bufio.NewReaderSize(io.NewSectionReader(r, int64(end.dirAt), int64(end.dirSize)), 64<<10)
	a := &archive{}
	var members []zipMember // where each entry's data lies, beside a.entries
	var fixed [zipDirLen]byte
	var name, extra []byte // reused: only the name's string is kept
	for range end.entries {
		if _, err := io.ReadFull(dir, fixed[:]); err != nil {
			return nil, fault.Detailf(ErrBadArchive, ": the zip's directory ends before its %d entries", end.entries)
		}
		le := binary.LittleEndian
		if le.Uint32(fixed[0:]) != zipDirSig {
			return nil, fault.Detailf(ErrBadArchive, ": the zip's directory holds something that is not an entry")
		}
		nameLen, extraLen, commentLen := int(le.Uint16(fixed[28:])), int(le.Uint16(fixed[30:])), int(le.Uint16(fixed[32:]))
		if err := x.entry(nameLen); err != nil {
			return nil, err
		}
		name, extra = grow(name, nameLen), grow(extra, extraLen)
		if _, err := io.ReadFull(dir, name); err != nil {
			return nil, fault.Detailf(ErrBadArchive, ": the zip's directory is cut short")
		}
		if _, err := io.ReadFull(dir, extra); err != nil {
			return nil, fault.Detailf(ErrBadArchive, ": the zip's directory is cut short")
		}
		if _, err := dir.Discard(commentLen); err != nil {
			return nil, fault.Detailf(ErrBadArchive, ": the zip's directory is cut short")
		}
		m := zipMember{
			header: int64(le.Uint32(fixed[42:])),
			packed: int64(le.Uint32(fixed[20:])),
			crc:    le.Uint32(fixed[16:]),
			method: le.Uint16(fixed[10:]),
		}
		unpacked := uint64(le.Uint32(fixed[24:]))
		if err := zip64Sizes(extra, &unpacked, &m); err != nil {
			return nil, fault.Detailf(ErrBadArchive, ": %q: %w", name, err)
		}
		if m.header < 0 || m.packed < 0 || unpacked > 1<<62 {
			return nil, fault.Detailf(ErrBadArchive, ": %q has sizes no file has", name)
		}
		if err := x.add(int64(unpacked)); err != nil {
			return nil, err
		}
		e := archiveEntry{name: cleanName(string(name)), size: int64(unpacked)}
		if e.name == "" {
			continue
		}
		if le.Uint16(fixed[8:])&zipEncrypted != 0 {
			return nil, fault.Detailf(ErrBadArchive, ": %q is encrypted", e.name)
		}
		if m.method != zipStored && m.method != zipDeflated {
			return nil, fault.Detailf(ErrBadArchive, ": %q is compressed with method %d; only stored and deflated entries are read", e.name, m.method)
		}
		mode := zipMode(le.Uint16(fixed[4:])>>8, le.Uint32(fixed[38:]), name[len(name)-1] == '/')
		switch {
		case mode.dir:
			e.kind, e.size = kindDir, 0
		case mode.link:
			link, err := readZipLink(r, e, m)
			if err != nil {
				return nil, err
			}
			if err := x.keep(len(link)); err != nil {
				return nil, err
			}
			e.kind, e.link, e.size = kindLink, link, 0
		case mode.file:
			e.kind, e.executable = kindFile, mode.executable
		default:
			return nil, fault.Detailf(ErrBadArchive, ": %q is neither a file, a folder nor a link", e.name)
		}
		a.entries = append(a.entries, e)
		members = append(members, m)
	}
	if _, err := dir.ReadByte(); err == nil {
		// Entries the end record does not count would be left out
		// quietly; such a zip is damaged or made to mislead.
		return nil, fault.Detailf(ErrBadArchive, ": the zip's directory holds more than the %d entries its end record says", end.entries)
	}
	a.rest = func(each contentFunc) error {
		for i, e := range a.entries {
			if e.kind != kindFile {
				continue
			}
			if err := readZipFile(r, e, members[i], func(content io.Reader) error { return each(i, e, content) }); err != nil {
				return err
			}
		}
		return nil
	}
	return a, nil
}

// grow is b resliced to n bytes, made anew only when it is too short.
func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

// readZipEnd finds and reads the end of central directory record, and the
// zip64 one when the first says its numbers did not fit.
func readZipEnd(r io.ReaderAt, size int64) (zipEnd, error) {
	tail := min(size, zipEndLen+zipMaxComment)
	buf := make([]byte, tail)
	if _, err := r.ReadAt(buf, size-tail); err != nil && !errors.Is(err, io.EOF) {
		return zipEnd{}, fmt.Errorf("code: read the zip's end: %w", err)
	}
	at := -1
	for i := len(buf) - zipEndLen; i >= 0; i-- {
		le := binary.LittleEndian
		if le.Uint32(buf[i:]) == zipEndSig && i+zipEndLen+int(le.Uint16(buf[i+20:])) <= len(buf) {
			at = i
			break
		}
	}
	if at < 0 {
		return zipEnd{}, fault.Detailf(ErrBadArchive, ": the zip has no end record")
	}
	rec, le := buf[at:], binary.LittleEndian
	end := zipEnd{
		entries: uint64(le.Uint16(rec[10:])),
		dirSize: uint64(le.Uint32(rec[12:])),
		dirAt:   uint64(le.Uint32(rec[16:])),
		endAt:   size - tail + int64(at),
	}
	if le.Uint16(rec[4:]) != 0 || le.Uint16(rec[6:]) != 0 || le.Uint16(rec[8:]) != le.Uint16(rec[10:]) {
		return zipEnd{}, fault.Detailf(ErrBadArchive, ": the zip spans several disks")
	}
	if end.entries != 0xffff && end.dirSize != 0xffffffff && end.dirAt != 0xffffffff {
		return end, nil
	}
	// The zip64 locator lies right before the end record and says where
	// the zip64 end record is.
	var loc [zip64LocatorLen]byte
	if end.endAt < zip64LocatorLen {
		return end, nil
	}
	if _, err := r.ReadAt(loc[:], end.endAt-zip64LocatorLen); err != nil || le.Uint32(loc[:]) != zip64LocatorSig {
		return end, nil // the numbers were not too large after all
	}
	at64 := le.Uint64(loc[8:])
	var rec64 [zip64EndLen]byte
	if at64 > uint64(end.endAt) {
		return zipEnd{}, fault.Detailf(ErrBadArchive, ": the zip64 end record is not where its locator says")
	}
	if _, err := r.ReadAt(rec64[:], int64(at64)); err != nil || le.Uint32(rec64[:]) != zip64EndSig {
		return zipEnd{}, fault.Detailf(ErrBadArchive, ": the zip64 end record is not where its locator says")
	}
	if le.Uint32(rec64[16:]) != 0 || le.Uint32(rec64[20:]) != 0 || le.Uint64(rec64[24:]) != le.Uint64(rec64[32:]) {
		return zipEnd{}, fault.Detailf(ErrBadArchive, ": the zip spans several disks")
	}
	end.entries, end.dirSize, end.dirAt = le.Uint64(rec64[32:]), le.Uint64(rec64[40:]), le.Uint64(rec64[48:])
	end.endAt = int64(at64)
	return end, nil
}

// zip64Sizes reads the zip64 extra field, which holds each of the sizes
// and the header's offset whose 32-bit field is all ones, in that order.
func zip64Sizes(extra []byte, unpacked *uint64, m *zipMember) error {
	le := binary.LittleEndian
	for len(extra) >= 4 {
		id, n := le.Uint16(extra), int(le.Uint16(extra[2:]))
		extra = extra[4:]
		if n > len(extra) {
			return errors.New("has a cut extra field")
		}
		field := extra[:n]
		extra = extra[n:]
		if id != zip64ExtraID {
			continue
		}
		next := func() (uint64, error) {
			if len(field) < 8 {
				return 0, errors.New("has a short zip64 field")
			}
			v := le.Uint64(field)
			field = field[8:]
			return v, nil
		}
		var err error
		if *unpacked == 0xffffffff {
			if *unpacked, err = next(); err != nil {
				return err
			}
		}
		if m.packed == 0xffffffff {
			var v uint64
			if v, err = next(); err != nil {
				return err
			}
			m.packed = int64(v)
		}
		if m.header == 0xffffffff {
			var v uint64
			if v, err = next(); err != nil {
				return err
			}
			m.header = int64(v)
		}
	}
	return nil
}

// zipEntryMode is what a zip entry is, from who made it, its external
// attributes and whether its name ends in a slash.
type zipEntryMode struct {
	dir, link, file, executable bool
}

func zipMode(madeBy uint16, external uint32, slashEnd bool) zipEntryMode {
	var m zipEntryMode
	switch madeBy {
	case zipMadeByUnix, zipMadeByMacOS:
		unix := external >> 16
		switch unix & 0o170000 {
		case 0o040000:
			m.dir = true
		case 0o120000:
			m.link = true
		case 0o100000, 0:
			m.file, m.executable = true, unix&0o111 != 0
		}
	case zipMadeByFAT, zipMadeByNTFS, zipMadeByVFAT:
		m.dir = external&0x10 != 0
		m.file = !m.dir
	default:
		m.file = true
	}
	if slashEnd {
		m = zipEntryMode{dir: true}
	}
	return m
}

// readZipLink reads a zip link's text, its content.
func readZipLink(r io.ReaderAt, e archiveEntry, m zipMember) (string, error) {
	if e.size > maxLinkTarget {
		return "", fault.Detailf(ErrBadArchive, ": %q is a link of more than %d bytes", e.name, maxLinkTarget)
	}
	var link []byte
	err := readZipFile(r, e, m, func(content io.Reader) error {
		var err error
		link, err = io.ReadAll(content)
		return err
	})
	return string(link), err
}

// readZipFile gives read the entry's data, decompressed and exactly as
// long as the directory says; once read is done the data must end there
// and match its checksum, else the whole read fails.
func readZipFile(r io.ReaderAt, e archiveEntry, m zipMember, read func(io.Reader) error) error {
	bad := func(why string) error { return fault.Detailf(ErrBadArchive, ": %q %s", e.name, why) }
	var local [zipLocalLen]byte
	if _, err := r.ReadAt(local[:], m.header); err != nil || binary.LittleEndian.Uint32(local[:]) != zipLocalSig {
		return bad("has no local header where the directory says")
	}
	at := m.header + zipLocalLen + int64(binary.LittleEndian.Uint16(local[26:])) + int64(binary.LittleEndian.Uint16(local[28:]))
	packed := io.NewSectionReader(r, at, m.packed)
	var data io.ReadCloser
	switch m.method {
	case zipStored:
		if m.packed != e.size {
			return bad("is stored with two sizes")
		}
		data = io.NopCloser(packed)
	case zipDeflated:
		data = flate.NewReader(packed)
	}
	defer data.Close()
	z := &zipData{data: data, left: e.size, sum: crc32.NewIEEE(), want: m.crc, bad: bad}
	if err := read(z); err != nil {
		return err
	}
	return z.end()
}

// zipData is an entry's decompressed data, cut at the size the directory
// gives, with its checksum taken as it is read. Its errors name the entry.
type zipData struct {
	data io.Reader
	left int64
	sum  hash.Hash32
	want uint32
	bad  func(why string) error
}

func (z *zipData) Read(p []byte) (int, error) {
	if z.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > z.left {
		p = p[:z.left]
	}
	n, err := z.data.Read(p)
	z.left -= int64(n)
	z.sum.Write(p[:n])
	switch {
	case errors.Is(err, io.EOF) && z.left > 0:
		return n, z.bad("is shorter than its directory entry says")
	case errors.Is(err, io.EOF):
		return n, nil // the next Read says EOF
	case err != nil:
		return n, z.bad(fmt.Sprintf("has damaged data (%v)", err))
	}
	return n, nil
}

// end checks that the data was read whole, ends where the directory says
// and matches its checksum.
func (z *zipData) end() error {
	if z.left > 0 {
		return z.bad("was not read to its end")
	}
	var more [1]byte
	if n, err := io.ReadFull(z.data, more[:]); n > 0 {
		return z.bad("holds more than its directory entry says")
	} else if err != nil && !errors.Is(err, io.EOF) {
		return z.bad(fmt.Sprintf("has damaged data (%v)", err))
	}
	if z.sum.Sum32() != z.want {
		return z.bad("does not match its checksum")
	}
	return nil
}
