package meta

// SetAfterMark makes s run f after a drop has marked its record and before
// it sweeps; an error from f ends the drop there, as a crash would.
func SetAfterMark(s *Store, f func() error) { s.testAfterMark = f }
