//go:build unix

package objstore

import (
	"os"
	"syscall"
)

func stampOf(fi os.FileInfo) (FileStamp, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() {
		return FileStamp{}, false
	}
	return FileStamp{
		dev: uint64(st.Dev), ino: uint64(st.Ino), size: fi.Size(),
		mtimeNs: fi.ModTime().UnixNano(), ok: true,
	}, true
}
