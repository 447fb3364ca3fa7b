package snapshotbuild

import "github.com/cockroachdb/pebble/v2/vfs"

// LocalFS returns the file system the builder writes its local files
// through (SST files, the local database, its checkpoint): the operating
// system's, with every sync a no-op. Local files of a build are scratch:
// they are uploaded, and a crash restarts the build from its input, so
// paying for fsync (of every SST, and Pebble's MANIFEST, WAL and directory
// syncs) buys nothing. Durability is the object store's job.
func LocalFS() vfs.FS { return noSyncFS{vfs.Default} }

type noSyncFS struct{ vfs.FS }

func (fs noSyncFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	return wrapNoSync(fs.FS.Create(name, category))
}

func (fs noSyncFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	return wrapNoSync(fs.FS.Open(name, opts...))
}

func (fs noSyncFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return wrapNoSync(fs.FS.OpenReadWrite(name, category, opts...))
}

func (fs noSyncFS) OpenDir(name string) (vfs.File, error) {
	return wrapNoSync(fs.FS.OpenDir(name))
}

func (fs noSyncFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	return wrapNoSync(fs.FS.ReuseForWrite(oldname, newname, category))
}

func (fs noSyncFS) Unwrap() vfs.FS { return fs.FS }

func wrapNoSync(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

type noSyncFile struct{ vfs.File }

func (noSyncFile) Sync() error                       { return nil }
func (noSyncFile) SyncData() error                   { return nil }
func (noSyncFile) SyncTo(length int64) (bool, error) { return false, nil }

var _ vfs.FS = noSyncFS{}
