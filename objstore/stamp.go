package objstore

import (
	"errors"
	"fmt"
	"os"
	"sync"
)

// FileStamp identifies one state of a local file: its device and inode,
// size and modification time. A writer that computed a file's SHA-256
// while writing it takes a stamp after its last write (StampFile) and hands
// both to PutFileStamped, which then links the file without reading it
// again as long as the file still has that stamp. The zero FileStamp
// matches no file.
//
// What a stamp can miss: the modification time has the kernel's
// timestamp granularity. On Linux 6.13 and later ext4, xfs, btrfs and
// tmpfs give a write a fine-grained time once the previous time was read
// (a stamp reads it), so any write after the stamp changes it; on older
// kernels and other file systems a write within the same clock tick (a
// few ms) as the stamp can go unseen, and so can a write that restores the
// old time on purpose. The tier reads every file of a bulk load before the
// load becomes visible (the coordinator's validation, or the replicas'
// restores), so such a file fails the commit rather than being served.
type FileStamp struct {
	dev, ino uint64
	size     int64
	mtimeNs  int64
	ok       bool
}

// StampFile stamps the file at path (following symbolic links).
func StampFile(path string) (FileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return FileStamp{}, fmt.Errorf("objstore: stamp %s: %w", path, err)
	}
	st, ok := stampOf(fi)
	if !ok {
		return FileStamp{}, fmt.Errorf("objstore: stamp %s: no device and inode numbers here: %w", path, errors.ErrUnsupported)
	}
	return st, nil
}

// IsZero reports whether s is the zero stamp.
func (s FileStamp) IsZero() bool { return !s.ok }

// matches reports whether fi describes the file state s was taken of.
func (s FileStamp) matches(fi os.FileInfo) bool {
	if !s.ok {
		return false
	}
	got, ok := stampOf(fi)
	return ok && got == s
}

// verifiedFiles remembers, for this process, which object file states
// were read (by GetFile, or through OpenVerified to the end) and found to
// hold which SHA-256: GetFile links an object's file without reading it
// again when the file still has a stamp verified before. On a single
// machine the coordinator validating a bulk load reads each object's file,
// and every replica restoring the bucket links that same inode: the first
// check covers the others.
var verifiedFiles = &stampCache{m: map[FileStamp]string{}, max: 1 << 14}

type stampCache struct {
	mu  sync.Mutex
	m   map[FileStamp]string
	max int
}

// verified reports whether a file with stamp st was verified to hold
// size bytes with SHA-256 sha.
func (c *stampCache) verified(st FileStamp, size int64, sha string) bool {
	if !st.ok || st.size != size {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	got, ok := c.m[st]
	return ok && got == sha
}

// add records that a file with stamp st holds sha. When full, the cache
// starts over: it only saves reads, and losing entries costs one read each.
func (c *stampCache) add(st FileStamp, sha string) {
	if !st.ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		clear(c.m)
	}
	c.m[st] = sha
}
