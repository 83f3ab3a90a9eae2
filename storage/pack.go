package storage

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// A publish stores thousands of small objects at once, and a file of its
// own for each costs the file system an inode, a folder entry and a
// journal commit: on this project's machines 0.2 to 2.5 s for the 11,500
// objects of a mid-sized import, against a few milliseconds to append them
// to one file. So objects of up to packObjectMax bytes are appended to a
// pack, one file of many objects, found through an index the store keeps
// in memory (a Put flushes the pack before it answers, a PutBatched
// leaves that to Sync); larger objects stay files of their own.
//
// A pack, <dir>/~packs/<n>.pack, is a sequence of records
//
//	key length (2 bytes) | size (4) | key | data | CRC-32C of all before (4)
//
// (big-endian). Records are only ever appended, by one writer under the
// store's lock. Once a pack is full it is sealed: flushed to disk, then
// listed in <n>.idx (each record's key, offset and size), so that opening
// the store reads the indexes of sealed packs, not their data. A pack
// without an index (the one being written when the process stopped) is
// read record by record at the next open, each checked by its CRC, and
// cut at the first that is not whole: what was appended after the last
// Sync may be lost in a crash, as Batcher allows, but never half there.
// Then it is sealed in turn.
//
// Deleting a packed object forgets it and appends the record's offset to
// <n>.dead, so it stays deleted after a restart. A pack none of whose
// records is live is removed; one whose dead records are half its bytes or
// more is compacted: its live records are appended to the current pack,
// which is flushed, and it is removed. (What a pack holds dead until then
// is disk space, never an object.)
//
// Several stores may be open over one folder (a restart's new server
// beside the old one): each appends to packs of its own, and sees what
// the others packed before it opened. Each holds a shared lock on
// <dir>/~packs/lock while open; only a store that can take it exclusively,
// alone over the folder, seals another's pack or removes or compacts a
// pack, since the others' indexes point into them. (An open that is not
// alone reads an unsealed pack as far as it is whole and leaves it.)
//
// The index costs about 100 bytes of memory per packed object: 100 MB for
// a million of them, the objects of some 90 imports of 11,500 files.

const (
	packFolder    = "~packs" // '~' is in no key, so no object's file is here
	packObjectMax = 1 << 20  // larger objects stay files of their own
	packMax       = 64 << 20 // a pack is sealed once this full
	recordHead    = 2 + 4    // key length and size
	recordTail    = 4        // CRC-32C
	indexEntry    = 8 + 4    // after the key: data offset and size
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errBadIndex is an index file that ends in the middle of an entry: the
// pack is read record by record instead.
var errBadIndex = errors.New("index cut short")

// packed is where a packed object's data lies.
type packed struct {
	pack *pack
	off  int64 // of the data in the pack's file
	size int64
}

func recordLen(key string, size int64) int64 {
	return recordHead + int64(len(key)) + size + recordTail
}

// pack is one pack file and what the store knows of it.
type pack struct {
	id   uint64
	base string // the path of its files without the extension
	end  int64  // the length of its records; the next one goes there
	dead int64  // bytes of records deleted or stored again since
	// partial: read while another store may have been writing it, so
	// records may follow what this store knows of.
	partial bool
}

func (p *pack) path(ext string) string { return p.base + ext }

// packs is the store's packed objects: the index, the packs, and the one
// being appended to. mu guards all of it and the current pack's file.
type packs struct {
	dir  string
	lock *os.File // ~packs/lock, held shared while the store is open

	mu      sync.Mutex
	index   map[string]packed
	all     map[uint64]*pack
	current *pack    // nil until the first batched put of this process
	file    *os.File // the current pack's, open for appending
	dirty   bool     // records appended to it since its last flush
	nextID  uint64
}

// openPacks indexes dir's packs (reading and sealing those never sealed),
// applies each one's deletions, and removes or compacts those mostly dead.
func openPacks(dir string) (*packs, error) {
	ps := &packs{dir: dir, index: map[string]packed{}, all: map[uint64]*pack{}}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	alone := setLock(lock, unix.F_WRLCK, false) == nil
	if !alone {
		if err := setLock(lock, unix.F_RDLCK, true); err != nil {
			lock.Close()
			return nil, err
		}
	}
	ps.lock = lock
	if err := ps.openAll(alone); err != nil {
		lock.Close()
		return nil, err
	}
	if alone {
		// Atomic, unlike flock's: the store is never without its lock.
		if err := setLock(lock, unix.F_RDLCK, false); err != nil {
			lock.Close()
			return nil, err
		}
	}
	return ps, nil
}

// setLock sets an open file description lock of typ on all of f, waiting
// for it or not.
func setLock(f *os.File, typ int16, wait bool) error {
	cmd := unix.F_OFD_SETLK
	if wait {
		cmd = unix.F_OFD_SETLKW
	}
	return unix.FcntlFlock(f.Fd(), cmd, &unix.Flock_t{Type: typ, Whence: io.SeekStart})
}

// openAll indexes every pack; alone, it also seals those never sealed
// and tidies them all.
func (ps *packs) openAll(alone bool) error {
	dir := ps.dir
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var ids []uint64
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".pack")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if id, err := strconv.ParseUint(name, 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	// A key in two packs (a compaction cut short) is the later one's.
	slices.Sort(ids)
	for _, id := range ids {
		p := &pack{id: id, base: filepath.Join(dir, strconv.FormatUint(id, 10))}
		if err := ps.load(p, alone); err != nil {
			return fmt.Errorf("pack %d: %w", id, err)
		}
		ps.all[id] = p
		ps.nextID = id + 1
	}
	live := map[*pack]int64{}
	for key, loc := range ps.index {
		live[loc.pack] += recordLen(key, loc.size)
	}
	for _, p := range ps.all {
		p.dead = p.end - live[p]
	}
	if !alone {
		return nil
	}
	for _, id := range ids {
		if err := ps.tidyAlone(ps.all[id]); err != nil {
			return fmt.Errorf("pack %d: %w", id, err)
		}
	}
	return nil
}

// record is one record of a pack as its index lists it.
type record struct {
	key       string
	off, size int64
}

// load indexes p's records, from its index file or, for a pack never
// sealed, from the records themselves (then sealing it), and forgets those
// its dead list names.
func (ps *packs) load(p *pack, alone bool) error {
	recs, dead, err := p.read(alone)
	if err != nil {
		return err
	}
	for _, r := range recs {
		ps.index[r.key] = packed{pack: p, off: r.off, size: r.size}
	}
	for _, r := range dead {
		if loc, ok := ps.index[r.key]; ok && loc.pack == p && loc.off == r.off {
			delete(ps.index, r.key)
		}
	}
	return nil
}

// read reads p's records, from its index file or, for a pack never
// sealed, from the records themselves: alone, it then seals it; otherwise
// another store may be writing it, and it is left as it is. It answers
// the records and those of them its dead list names, and sets p.end.
func (p *pack) read(alone bool) (recs, dead []record, err error) {
	recs, err = readIndex(p.path(".idx"))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errBadIndex) {
		if alone {
			recs, err = recoverPack(p)
		} else {
			recs, err = readPack(p)
			p.partial = true
		}
	}
	if err != nil {
		return nil, nil, err
	}
	if n := len(recs); n > 0 {
		p.end = recs[n-1].off + recs[n-1].size + recordTail
	}
	list, err := os.ReadFile(p.path(".dead"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	}
	for line := range strings.Lines(string(list)) {
		// A line a crash cut short has no newline: its deletion is
		// lost, rather than its digits naming another record.
		off, err := strconv.ParseInt(strings.TrimSuffix(line, "\n"), 10, 64)
		if err != nil || !strings.HasSuffix(line, "\n") {
			continue
		}
		if i, found := slices.BinarySearchFunc(recs, off, func(r record, off int64) int { return cmp.Compare(r.off, off) }); found {
			dead = append(dead, recs[i])
		}
	}
	return recs, dead, nil
}

// complete brings what the store knows of a partial pack up to date, now
// that it is alone over the folder: the records another store appended
// since are indexed (unless their keys have a copy already, or are dead),
// so that a compaction copies them too.
func (ps *packs) complete(p *pack) error {
	if !p.partial {
		return nil
	}
	recs, dead, err := p.read(true)
	if err != nil {
		return err
	}
	p.partial = false
	isDead := map[int64]bool{}
	for _, r := range dead {
		isDead[r.off] = true
	}
	var live int64
	for _, r := range recs {
		loc, ok := ps.index[r.key]
		if !ok && !isDead[r.off] {
			loc, ok = packed{pack: p, off: r.off, size: r.size}, true
			ps.index[r.key] = loc
		}
		if ok && loc.pack == p && loc.off == r.off {
			live += recordLen(r.key, r.size)
		}
	}
	p.dead = p.end - live
	return nil
}

// recoverPack reads an unsealed pack's records, cuts it after the last
// whole one, and seals it.
func recoverPack(p *pack) ([]record, error) {
	f, err := os.OpenFile(p.path(".pack"), os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, end, err := readRecords(f)
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(end); err != nil {
		return nil, err
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	return recs, writeIndex(p, recs)
}

// readPack reads the whole records of a pack another store may still be
// writing, and leaves it as it is.
func readPack(p *pack) ([]record, error) {
	f, err := os.Open(p.path(".pack"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, _, err := readRecords(f)
	return recs, err
}

// readRecords reads a pack's records from its start, checking each, up to
// the first that is not whole, and answers where that one starts.
func readRecords(f *os.File) ([]record, int64, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, 0, err
	}
	r := bufio.NewReaderSize(f, 256<<10)
	var recs []record
	var off int64
	var head [recordHead]byte
	var body []byte
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return recs, off, nil // the end, or a torn head
		}
		keyLen := int(binary.BigEndian.Uint16(head[0:2]))
		size := int64(binary.BigEndian.Uint32(head[2:6]))
		if keyLen == 0 || keyLen > MaxKeyLen || size > packObjectMax {
			return recs, off, nil
		}
		n := keyLen + int(size)
		body = slices.Grow(body[:0], n+recordTail)[:n+recordTail]
		if _, err := io.ReadFull(r, body); err != nil {
			return recs, off, nil
		}
		sum := crc32.Update(crc32.Update(0, castagnoli, head[:]), castagnoli, body[:n])
		key := string(body[:keyLen])
		if binary.BigEndian.Uint32(body[n:]) != sum || CheckKey(key) != nil {
			return recs, off, nil
		}
		recs = append(recs, record{key: key, off: off + recordHead + int64(keyLen), size: size})
		off += recordLen(key, size)
	}
}

// readIndex reads an index file: per record its key's length (2 bytes),
// the key, the data's offset (8) and size (4), in the pack's order.
func readIndex(name string) ([]record, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var recs []record
	for len(data) > 0 {
		if len(data) < 2 {
			return nil, fmt.Errorf("%s: %w", name, errBadIndex)
		}
		n := int(binary.BigEndian.Uint16(data))
		if len(data) < 2+n+indexEntry {
			return nil, fmt.Errorf("%s: %w", name, errBadIndex)
		}
		e := data[2+n:]
		recs = append(recs, record{key: string(data[2 : 2+n]),
			off: int64(binary.BigEndian.Uint64(e)), size: int64(binary.BigEndian.Uint32(e[8:]))})
		data = data[2+n+indexEntry:]
	}
	return recs, nil
}

// writeIndex seals p, whose records are on disk: its index lists them
// all, live or dead, so that a restart counts the dead ones too.
func writeIndex(p *pack, recs []record) error {
	var buf bytes.Buffer
	var e [indexEntry]byte
	for _, r := range recs {
		buf.Write(binary.BigEndian.AppendUint16(nil, uint16(len(r.key))))
		buf.WriteString(r.key)
		binary.BigEndian.PutUint64(e[:], uint64(r.off))
		binary.BigEndian.PutUint32(e[8:], uint32(r.size))
		buf.Write(e[:])
	}
	// Flushed before and after its rename: an index the disk had not
	// written would hide the pack's objects.
	tmp := p.path(".idx~")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(buf.Bytes())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p.path(".idx"))
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(tmp))
}

// get answers where key's data lies.
func (ps *packs) get(key string) (packed, bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	loc, ok := ps.index[key]
	return loc, ok
}

// open opens the data of key for reading; ok is false when it is not
// packed. A pack compacted between the look-up and the open is looked up
// again: its records are in a later pack by then.
func (ps *packs) open(key string) (rc io.ReadCloser, ok bool, err error) {
	for range 3 {
		loc, found := ps.get(key)
		if !found {
			return nil, false, nil
		}
		f, err := os.Open(loc.pack.path(".pack"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, true, err
		}
		return sectionFile{io.NewSectionReader(f, loc.off, loc.size), f}, true, nil
	}
	return nil, true, fmt.Errorf("%s: its pack went away three times while it was opened", key)
}

// sectionFile reads one object out of a pack file.
type sectionFile struct {
	*io.SectionReader
	f *os.File
}

func (s sectionFile) Close() error { return s.f.Close() }

// put appends key's record with data and makes it the object's copy;
// durable flushes the pack before it answers.
func (ps *packs) put(key string, data []byte, durable bool) error {
	rec := make([]byte, 0, recordLen(key, int64(len(data))))
	rec = binary.BigEndian.AppendUint16(rec, uint16(len(key)))
	rec = binary.BigEndian.AppendUint32(rec, uint32(len(data)))
	rec = append(rec, key...)
	rec = append(rec, data...)
	rec = binary.BigEndian.AppendUint32(rec, crc32.Checksum(rec, castagnoli))

	ps.mu.Lock()
	defer ps.mu.Unlock()
	off, err := ps.appendLocked(rec)
	if err != nil {
		return err
	}
	if durable {
		if err := ps.syncLocked(); err != nil {
			ps.file.Truncate(off)
			ps.current.end = off
			return err
		}
	}
	ps.setLocked(key, packed{pack: ps.current, off: off + recordHead + int64(len(key)), size: int64(len(data))})
	return nil
}

// appendLocked appends a whole record to the current pack, sealing a full
// one and starting the next first, and answers its offset.
func (ps *packs) appendLocked(rec []byte) (int64, error) {
	if ps.current != nil && ps.current.end+int64(len(rec)) > packMax {
		if err := ps.sealLocked(); err != nil {
			return 0, err
		}
	}
	if ps.current == nil {
		if err := ps.startLocked(); err != nil {
			return 0, err
		}
	}
	p := ps.current
	if _, err := ps.file.WriteAt(rec, p.end); err != nil {
		// Cut what part of it was written, so the next record follows
		// the last whole one.
		ps.file.Truncate(p.end)
		return 0, err
	}
	off := p.end
	p.end += int64(len(rec))
	ps.dirty = true
	return off, nil
}

// startLocked makes the next pack the current one. Its number is taken
// with O_EXCL, so another store over the same folder never writes into it,
// and the folder is flushed, so the pack's name survives a crash with its
// records.
func (ps *packs) startLocked() error {
	for {
		id := ps.nextID
		ps.nextID++
		p := &pack{id: id, base: filepath.Join(ps.dir, strconv.FormatUint(id, 10))}
		f, err := os.OpenFile(p.path(".pack"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err == nil {
			err = syncDir(ps.dir)
		}
		if err != nil {
			if f != nil {
				f.Close()
				os.Remove(p.path(".pack"))
			}
			return err
		}
		ps.current, ps.file = p, f
		ps.all[id] = p
		return nil
	}
}

// sealLocked flushes the current pack, writes its index and lets it go:
// the next batched put starts a new one. It tidies nothing: it may run in
// the middle of a compaction (a full pack), and a pack mostly dead is
// tidied at its next deletion anyway.
func (ps *packs) sealLocked() error {
	p, f := ps.current, ps.file
	if p == nil {
		return nil
	}
	if err := f.Sync(); err != nil {
		return err
	}
	recs, _, err := readRecords(f)
	if err != nil {
		return err
	}
	if err := writeIndex(p, recs); err != nil {
		return err
	}
	f.Close()
	ps.current, ps.file, ps.dirty = nil, nil, false
	return nil
}

// setLocked makes loc key's copy; the record it had before is dead.
func (ps *packs) setLocked(key string, loc packed) {
	if old, ok := ps.index[key]; ok {
		ps.markDeadLocked(key, old)
	}
	ps.index[key] = loc
}

// forget deletes key's packed copy, if it has one, and answers whether it
// had. A pack left mostly dead is compacted or removed.
func (ps *packs) forget(key string) (bool, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	loc, ok := ps.index[key]
	if !ok {
		return false, nil
	}
	delete(ps.index, key)
	ps.markDeadLocked(key, loc)
	return true, ps.tidy(loc.pack)
}

// markDeadLocked counts the record of key at loc as dead and notes its
// offset in its pack's dead list. Not flushed, as a deleted file is not:
// after a crash a deleted object may be back, never a live one gone.
func (ps *packs) markDeadLocked(key string, loc packed) {
	loc.pack.dead += recordLen(key, loc.size)
	f, err := os.OpenFile(loc.pack.path(".dead"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return // the record stays dead in memory; a restart finds it live
	}
	f.WriteString(strconv.FormatInt(loc.off, 10) + "\n")
	f.Close()
}

// tidy is tidyAlone when no other store is open over the folder; with
// one, the pack stays as it is. ps.mu must be held.
func (ps *packs) tidy(p *pack) error {
	if !ps.untidy(p) {
		return nil // the usual case, without a system call
	}
	if ps.lock == nil || setLock(ps.lock, unix.F_WRLCK, false) != nil {
		return nil // closed, or another store is open
	}
	defer setLock(ps.lock, unix.F_RDLCK, false)
	return ps.tidyAlone(p)
}

// untidy says p should go: nothing in it lives, or, unless it is the
// pack being written, half its bytes or more are dead.
func (ps *packs) untidy(p *pack) bool {
	if p == ps.current {
		return p.end > 0 && p.dead == p.end
	}
	return 2*p.dead >= p.end
}

// tidyAlone removes p when nothing in it lives, and compacts it when half
// its bytes or more are dead (but for the pack being written, which goes
// only when all of it is dead). The store must hold the folder's lock
// exclusively, and ps.mu (or ps is not yet shared).
func (ps *packs) tidyAlone(p *pack) error {
	if !ps.untidy(p) {
		return nil
	}
	if err := ps.complete(p); err != nil {
		return err
	}
	if !ps.untidy(p) {
		return nil // another store's records live in it
	}
	if p == ps.current {
		ps.file.Close()
		ps.current, ps.file, ps.dirty = nil, nil, false
	} else if p.dead < p.end {
		if err := ps.compactLocked(p); err != nil {
			return err
		}
	}
	delete(ps.all, p.id)
	for _, ext := range []string{".pack", ".idx", ".dead"} {
		if err := os.Remove(p.path(ext)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// compactLocked copies p's live records to the current pack and flushes
// it, so that p can go.
func (ps *packs) compactLocked(p *pack) error {
	f, err := os.Open(p.path(".pack"))
	if err != nil {
		return err
	}
	defer f.Close()
	var keys []string
	for key, loc := range ps.index {
		if loc.pack == p {
			keys = append(keys, key)
		}
	}
	for _, key := range keys {
		loc := ps.index[key]
		rec := make([]byte, recordLen(key, loc.size))
		if _, err := f.ReadAt(rec, loc.off-recordHead-int64(len(key))); err != nil {
			return err
		}
		off, err := ps.appendLocked(rec)
		if err != nil {
			return err
		}
		ps.index[key] = packed{pack: ps.current, off: off + recordHead + int64(len(key)), size: loc.size}
	}
	return ps.syncLocked()
}

// sync flushes what was appended to the current pack since its last
// flush (sealed packs were flushed as they were sealed).
func (ps *packs) sync() error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.syncLocked()
}

func (ps *packs) syncLocked() error {
	if ps.file == nil || !ps.dirty {
		return nil
	}
	if err := ps.file.Sync(); err != nil {
		return err
	}
	ps.dirty = false
	return nil
}

// liveBytes is the size of every packed object.
func (ps *packs) liveBytes() int64 {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var n int64
	for _, loc := range ps.index {
		n += loc.size
	}
	return n
}

// close seals the current pack, so that the next open reads its index
// rather than its records.
func (ps *packs) close() error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.lock == nil {
		return nil // closed already
	}
	err := ps.sealLocked()
	if cerr := ps.lock.Close(); err == nil {
		err = cerr
	}
	ps.lock = nil
	return err
}
