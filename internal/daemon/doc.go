// Package daemon is the only place where thaw's concrete parts are wired
// together: embedded or external etcd, the object store, the changelog, the
// coordinator and tablet servers, the promoter and its triggers.
//
// Contract: every long-running piece is a Runnable (Start(ctx) error that
// blocks until ctx is done) composed here; leader-gated pieces start only
// after their lease is won and stop when it is lost. Nothing outside this
// package (and cmd/thaw, internal/cli) constructs concrete dependencies of
// another package; libraries take small consumer-side interfaces.
//
// Status: the roles arrive with the tier (issue 4) and promoter (issue 8)
// work; this package holds no code yet.
package daemon
