package runstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
)

// bbolt's file format (version 2), as far as checkFreelist reads it: a
// page starts with a 16-byte header (id 8, flags 2, count 2, overflow 4);
// pages 0 and 1 are meta pages, whose meta follows the header (magic 4,
// version 4, page size 4, flags 4, root bucket 16, freelist page 8, high
// page 8, txid 8, then a checksum of those 56 bytes).
const (
	pageHeader       = 16
	metaMagic        = 0xED0CDAED
	metaVersion      = 2
	metaChecksummed  = 56
	freelistPageFlag = 0x10
	noFreelist       = ^uint64(0)
	pgidSize         = 8
)

// errFreelistTooLong is a freelist page that counts more page ids than
// the file holds after it.
var errFreelistTooLong = errors.New("the freelist page counts more ids than the file holds")

// checkFreelist reads, in the bbolt file f, the freelist page its current
// meta names, and fails if the page counts more ids than the file has
// room for. bbolt allocates a slice of that many ids and copies them out
// of its mapping before anything could say the file is damaged: a count
// in the billions is an allocation the process does not survive, a
// smaller one a read past the mapping. A file this cannot read as bbolt's
// (no valid meta page) passes: bbolt's own open refuses it.
func checkFreelist(f *os.File) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	var first [4096]byte
	n, err := f.ReadAt(first[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	m0, ok0 := readMeta(first[:n])
	pageSize := int64(4096)
	if ok0 {
		pageSize = int64(m0.pageSize)
	}
	buf := make([]byte, pageHeader+metaChecksummed+8)
	m1, ok1 := meta{}, false
	if n, err := f.ReadAt(buf, pageSize); err == nil || errors.Is(err, io.EOF) {
		m1, ok1 = readMeta(buf[:n])
	}
	cur := m0
	switch {
	case ok0 && ok1 && m1.txid > m0.txid, !ok0 && ok1:
		cur = m1
	case !ok0:
		return nil
	}
	if cur.freelist == noFreelist {
		return nil
	}
	ps := uint64(cur.pageSize)
	at := cur.freelist * ps
	if cur.freelist > uint64(size)/ps || at+pageHeader+pgidSize > uint64(size) {
		return fmt.Errorf("the freelist page %d is past the file's end", cur.freelist)
	}
	head := make([]byte, pageHeader+pgidSize)
	if _, err := f.ReadAt(head, int64(at)); err != nil {
		return err
	}
	if binary.LittleEndian.Uint16(head[8:]) != freelistPageFlag {
		return nil // bbolt says so itself, as a panic openFile recovers
	}
	room := (uint64(size) - at - pageHeader) / pgidSize
	ids := uint64(binary.LittleEndian.Uint16(head[10:]))
	if ids == 0xFFFF { // the count is the first id, which takes a place
		ids = binary.LittleEndian.Uint64(head[pageHeader:])
		if ids >= room {
			return fmt.Errorf("%w: %d ids in room for %d", errFreelistTooLong, ids, room)
		}
		ids++
	}
	if ids > room {
		return fmt.Errorf("%w: %d ids in room for %d", errFreelistTooLong, ids, room)
	}
	return nil
}

type meta struct {
	pageSize       uint32
	freelist, txid uint64
}

// readMeta reads the meta of a meta page p, if it is a valid one.
func readMeta(p []byte) (meta, bool) {
	if len(p) < pageHeader+metaChecksummed+8 {
		return meta{}, false
	}
	m := p[pageHeader:]
	le := binary.LittleEndian
	if le.Uint32(m) != metaMagic || le.Uint32(m[4:]) != metaVersion {
		return meta{}, false
	}
	h := fnv.New64a()
	_, _ = h.Write(m[:metaChecksummed])
	if h.Sum64() != le.Uint64(m[metaChecksummed:]) {
		return meta{}, false
	}
	ps := le.Uint32(m[8:])
	if ps < 1024 || ps&(ps-1) != 0 {
		return meta{}, false
	}
	return meta{pageSize: ps, freelist: le.Uint64(m[32:]), txid: le.Uint64(m[48:])}, true
}
