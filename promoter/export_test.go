package promoter

// SetAfterKeys sets a hook that runs between the two reads of a List that
// reads the keys first (tests of the fallback when their revision is
// compacted meanwhile).
func SetAfterKeys(l *EtcdLedger, f func()) { l.afterKeys = f }

// HoldKey marks k running, as a promotion of it would, until the returned
// function is called (tests of work that must leave a running key alone).
func HoldKey(p *Promoter, k Key) (release func()) {
	if !p.q.tryAcquireIdle(k) {
		panic("HoldKey: " + k.String() + " runs or is queued")
	}
	return func() { p.q.done(k) }
}
