//go:build !unix

package objstore

import "os"

// stampOf has no device and inode numbers to go by here: no file is
// stamped, and PutFileStamped always reads the file.
func stampOf(os.FileInfo) (FileStamp, bool) { return FileStamp{}, false }
