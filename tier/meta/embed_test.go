package meta_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/tier/meta"
)

// TestEmbeddedRestartKeepsData writes through an embedded etcd (fsync on),
// stops it and starts it again on the same directory.
func TestEmbeddedRestartKeepsData(t *testing.T) {
	dir := t.TempDir()
	start := func() *meta.Embedded {
		m, err := meta.StartEmbedded(ctxTimeout(t, 30*time.Second), meta.EmbeddedConfig{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if eps := m.Endpoints(); len(eps) != 1 {
			t.Fatalf("endpoints %v", eps)
		}
		return m
	}
	open := func(m *meta.Embedded) (*meta.Store, meta.Guard, func()) {
		cli, err := m.Client(ctxTimeout(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		s, err := meta.New(cli, "")
		if err != nil {
			t.Fatal(err)
		}
		l, err := fencing.Elect(ctxTimeout(t, 10*time.Second), cli, s.ElectionPrefix(), "c", 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return s, meta.GuardOf(l), func() { l.Resign(context.Background()); cli.Close() }
	}

	m := start()
	s, g, done := open(m)
	ctx := t.Context()
	if _, err := s.CreateDatabase(ctx, g, "d"); err != nil {
		t.Fatal(err)
	}
	want, err := s.CreateTable(ctx, g, tableSpec("d", "t", 3, false))
	if err != nil {
		t.Fatal(err)
	}
	done()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	m = start()
	defer m.Close()
	s, g, done = open(m)
	defer done()
	got, err := s.GetTable(ctx, "d", "t")
	if err != nil || got.Rev != want.Rev || got.Value.ID != want.Value.ID || got.Value.CreatedMs != want.Value.CreatedMs {
		t.Fatalf("after restart: %+v, %v; want %+v", got, err, want)
	}
	// The sequence survived too: the next table gets the next id.
	next, err := s.CreateTable(ctx, g, tableSpec("d", "u", 1, false))
	if err != nil || next.Value.ID != want.Value.ID+1 {
		t.Fatalf("next table: %+v, %v", next.Value, err)
	}
}

func TestEmbeddedAndConnectRejectBadConfig(t *testing.T) {
	ctx := t.Context()
	for _, cfg := range []meta.EmbeddedConfig{
		{},
		{Dir: t.TempDir(), ClientURL: "https://127.0.0.1:0"},
		{Dir: t.TempDir(), ClientURL: "127.0.0.1"},
		{Dir: t.TempDir(), ClientURL: "http://127.0.0.1:0/x"},
	} {
		if m, err := meta.StartEmbedded(ctx, cfg); !errors.Is(err, meta.ErrInvalid) {
			if m != nil {
				m.Close()
			}
			t.Errorf("start %+v: %v; want ErrInvalid", cfg, err)
		}
	}
	if _, err := meta.Connect(ctx, nil, meta.ClientOptions{}); !errors.Is(err, meta.ErrInvalid) {
		t.Errorf("connect without endpoints: %v", err)
	}
	// Nothing listens on a port just released.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if cli, err := meta.Connect(ctxTimeout(t, 500*time.Millisecond), []string{"http://" + addr}, meta.ClientOptions{}); err == nil {
		cli.Close()
		t.Error("connected to a closed port")
	}
	if _, err := meta.New(nil, ""); !errors.Is(err, meta.ErrInvalid) {
		t.Errorf("new store without a client: %v", err)
	}
}
