package snapshotbuild

import "sync/atomic"

// prefaulter makes chunk memory resident ahead of the goroutine filling the
// chunk, on another core. The first touch of a freshly mapped page costs a
// page fault (on the project's VM about 0.4 s per GiB, more for memory the
// hypervisor has not backed yet); in a build with more than one worker, the
// input phase otherwise pays that on the Add goroutine while the second core
// idles, which is most of what separates "two workers" from "twice one
// worker" on inputs that fit the budget.
//
// It only populates memory the budget has already granted to the chunk
// (chunk.add reserves one grant ahead and asks for the part of the
// reservation the filler has not reached), so the build's resident memory
// stays within its budget. Population keeps contents (MADV_POPULATE_WRITE
// on Linux), so racing the filler on a page is harmless. Requests are
// dropped when the goroutine is behind: the filler then faults those pages
// itself, as it would without a prefaulter.
//
// Ownership: request and stop are called with Builder.mu held; stop runs
// before any chunk is unmapped.
type prefaulter struct {
	req     chan []byte
	done    chan struct{}
	stopped bool          // guarded by Builder.mu
	failed  atomic.Bool   // the kernel refused: stop asking
	bytes   *atomic.Int64 // bytes populated (the Builder's counter)
}

// newPrefaulter starts a prefaulter, or returns nil where memory cannot be
// populated ahead (not Linux, or a kernel without MADV_POPULATE_WRITE).
func newPrefaulter(bytes *atomic.Int64) *prefaulter {
	if !canPopulate() {
		return nil
	}
	p := &prefaulter{req: make(chan []byte, 8), done: make(chan struct{}), bytes: bytes}
	go p.loop()
	return p
}

func (p *prefaulter) loop() {
	defer close(p.done)
	for mem := range p.req {
		if p.failed.Load() {
			continue
		}
		if err := populate(mem); err != nil {
			p.failed.Store(true)
			continue
		}
		p.bytes.Add(int64(len(mem)))
	}
}

// request asks for mem (page-aligned) to be populated, unless the
// prefaulter is behind, stopped or failed.
func (p *prefaulter) request(mem []byte) {
	if p == nil || p.stopped || len(mem) == 0 || p.failed.Load() {
		return
	}
	select {
	case p.req <- mem:
	default:
	}
}

// stop ends the goroutine and waits for it. Safe on nil and twice.
func (p *prefaulter) stop() {
	if p == nil || p.stopped {
		return
	}
	p.stopped = true
	close(p.req)
	<-p.done
}

// prefaultMin is the least a request covers: fewer, larger system calls.
const prefaultMin = 256 << 10

// prefaultAhead asks c.pf to populate the part of c's reservation that the
// pairs added so far do not use, split between the arena and the two entry
// regions in the proportion of the pair just added (klen+vlen arena bytes
// to 2 entries). Only whole pages are requested; each region's request
// starts where the previous one ended.
func (c *chunk) prefaultAhead(pairBytes int64) {
	slack := c.reserved - c.used()
	if slack <= 0 {
		return
	}
	arenaShare := slack * pairBytes / (pairBytes + 2*entrySize)
	entShare := (slack - arenaShare) / 2
	page := pageSize
	// The marks only grow, and pair sizes may vary: never let the requested
	// regions together exceed the reservation.
	fits := func(arenaEnd, entEnd int64) bool {
		return max(arenaEnd, int64(c.pfArena))+2*max(entEnd, int64(c.pfEnt)) <= c.reserved
	}
	if end := (int64(len(c.arena)) + arenaShare) / page * page; end-int64(c.pfArena) >= prefaultMin && fits(end, 0) {
		start := max(int64(c.pfArena), int64(len(c.arena))/page*page)
		c.pf.request(c.arenaMem[start:end])
		c.pfArena = int(end)
	}
	if end := (int64(len(c.ents))*entrySize + entShare) / page * page; end-int64(c.pfEnt) >= prefaultMin && fits(0, end) {
		start := max(int64(c.pfEnt), int64(len(c.ents))*entrySize/page*page)
		c.pf.request(c.entMem[start:end])
		c.pf.request(c.scrMem[start:end])
		c.pfEnt = int(end)
	}
}
