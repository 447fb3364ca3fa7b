package main

import (
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestNohupServerSurvivesHangup: a daemon started under nohup (SIGHUP
// ignored) keeps running when its terminal hangs up. signal.Notify on
// SIGHUP un-ignored it, so the hang-up stopped the tier (exit 0: a
// supervisor restarting on failure would not restart it).
func TestNohupServerSurvivesHangup(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "thaw")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cmd := exec.Command("sh", "-c", `trap '' HUP; exec nohup "$0" server --data-dir "$1" --listen 127.0.0.1:0 --tablets 1`, bin, filepath.Join(dir, "data"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill(); <-done }()
	time.Sleep(3 * time.Second)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		done <- err
		t.Fatalf("thaw server started under nohup stopped on SIGHUP: %v", err)
	case <-time.After(3 * time.Second):
	}
	// SIGTERM still stops it gracefully.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Fatalf("thaw server on SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("thaw server did not stop on SIGTERM")
	}
}
