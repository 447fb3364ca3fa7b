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
// Beside it, or elsewhere, it is taken.
func TestTabletChangelogNotInReplicas(t *testing.T) {
	for dir, ok := range map[string]bool{
		"/d/replicas": false, "/d/replicas/": false, "/d/./replicas": false, "/d/replicas/logs": false, "/d/x/../replicas": false,
		"/d/changelog": true, "/d/replicas-log": true, "/logs": true, "/d": true,
	} {
		var tc TabletConfig
		tc.Defaults()
		tc.ID, tc.DataDir, tc.ObjectStore, tc.Etcd.Endpoints = "ts-1", "/d", "file:///tmp/r", []string{"http://127.0.0.1:2379"}
		tc.Changelog.Dir = dir
		err := tc.Validate()
		if ok != (err == nil) || !ok && !strings.Contains(err.Error(), "inside the replicas' directory") {
			t.Errorf("changelog.dir %q: %v", dir, err)
		}
	}
}
