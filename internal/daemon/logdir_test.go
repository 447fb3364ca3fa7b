package daemon

import (
	"strings"
	"testing"
)

// TestTabletChangelogNotInReplicas: a changelog directory inside (or equal
// to) {data_dir}/replicas is refused. A bucket's local log directory has
// the name of its replica's directory (t7-b3), so opening, replacing or
// dropping the replica, and the start's cleanup of stale replicas,
// deleted the log and the acknowledged writes since the last snapshot.
// data_dir itself is refused too: both lock a LOCK file there, so the
// tablet server could never start (it passed --check). Beside it, or
// elsewhere, it is taken.
func TestTabletChangelogNotInReplicas(t *testing.T) {
	const inReplicas, isDataDir = "inside the replicas' directory", "is data_dir"
	for dir, want := range map[string]string{
		"/d/replicas": inReplicas, "/d/replicas/": inReplicas, "/d/./replicas": inReplicas, "/d/replicas/logs": inReplicas, "/d/x/../replicas": inReplicas,
		"/d": isDataDir, "/d/": isDataDir, "/d/x/..": isDataDir,
		"/d/changelog": "", "/d/replicas-log": "", "/logs": "", "/": "",
	} {
		var tc TabletConfig
		tc.Defaults()
		tc.ID, tc.DataDir, tc.ObjectStore, tc.Etcd.Endpoints = "ts-1", "/d", "file:///tmp/r", []string{"http://127.0.0.1:2379"}
		tc.Changelog.Dir = dir
		err := tc.Validate()
		if (want == "") != (err == nil) || want != "" && !strings.Contains(err.Error(), want) {
			t.Errorf("changelog.dir %q: %v, want %q", dir, err, want)
		}
	}
}
