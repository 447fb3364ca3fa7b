package daemon

import (
	"io"
	"net/http"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestTabletReadyzForeignRegistration: while an earlier incarnation's
// registration (a crash on another host, or a lost data_dir) is still
// alive, a new thaw tablet cannot register (ErrExists) and /readyz says so.
// It checked only that {prefix}/servers/{id} existed, and answered ready.
func TestTabletReadyzForeignRegistration(t *testing.T) {
	dir := t.TempDir()
	roles := startRoleTest(t, dir)
	cli, err := clientv3.New(clientv3.Config{Endpoints: roles.endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// The previous incarnation of ts-1, killed: its lease lives 60s more.
	lease, err := cli.Grant(t.Context(), 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(t.Context(), "/thaw/servers/ts-1", `{"version":1,"id":"ts-1","address":"http://10.0.0.9:7071"}`, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	_, tablet := runRoles(t, roles.coordinator(), roles.tablet("ts-1"))
	var body string
	var code int
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + tablet + PathReadyz)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body, code = string(b), resp.StatusCode
			if code == http.StatusOK {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	got, err := cli.Get(t.Context(), "/thaw/servers/ts-1")
	if err != nil {
		t.Fatal(err)
	}
	holder := clientv3.LeaseID(got.Kvs[0].Lease)
	t.Logf("readyz %d:\n%s\nregistration held by lease %x (the dead incarnation's: %v)", code, body, holder, holder == lease.ID)
	if code == http.StatusOK && holder == lease.ID {
		t.Errorf("/readyz answers ready while ts-1 is registered by another (dead) incarnation and this process is not registered")
	}
}
