package promoter

// SetAfterKeys sets a hook that runs between the two reads of a List that
// reads the keys first (tests of the fallback when their revision is
// compacted meanwhile).
func SetAfterKeys(l *EtcdLedger, f func()) { l.afterKeys = f }
