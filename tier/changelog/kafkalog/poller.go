package kafkalog

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// poller watches the high watermarks of the logs that Waits are blocked
// on, for the whole provider: one ListOffsets request (split by franz-go
// per partition leader) per round, however many logs wait. A round that
// finds a log grown wakes its Waits, which then fetch the records. Rounds
// are 5ms apart after one that woke a Wait, backing off to
// Config.PollInterval while nothing happens.
//
// A fetch that waits at the broker (a long poll) per log would be simpler,
// but Kafka answers a connection's requests in order, so every other
// request of the provider's client to that broker would queue behind it.
type poller struct {
	p    *Provider
	kick chan struct{}
	done chan struct{}

	mu      sync.Mutex
	stopped bool
	waiters map[*kafkaLog]*waiter
}

// waiter is the Waits of one handle: woken when the log's high watermark
// passes k, the Kafka offset after the chain's end when they registered.
type waiter struct {
	k  int64
	ch chan struct{}
}

func newPoller(p *Provider) *poller {
	return &poller{p: p, kick: make(chan struct{}, 1), done: make(chan struct{}), waiters: make(map[*kafkaLog]*waiter)}
}

// register returns a channel closed once l's partition holds records at or
// past Kafka offset k (or the poller cannot tell, or stops, or l is
// closed).
func (pl *poller) register(l *kafkaLog, k int64) <-chan struct{} {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	// A handle closed since its Wait looked (Close cancels l.ctx before it
	// forgets l) is not registered again: it would stay, polled, until its
	// topic grew.
	if pl.stopped || l.ctx.Err() != nil {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	if w, ok := pl.waiters[l]; ok && w.k == k {
		return w.ch
	} else if ok {
		close(w.ch) // registered at another end: let those Waits look again
	}
	w := &waiter{k: k, ch: make(chan struct{})}
	pl.waiters[l] = w
	select {
	case pl.kick <- struct{}{}:
	default:
	}
	return w.ch
}

// forget wakes and drops l's Waits (the handle closes).
func (pl *poller) forget(l *kafkaLog) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if w, ok := pl.waiters[l]; ok {
		close(w.ch)
		delete(pl.waiters, l)
	}
}

func (pl *poller) run(ctx context.Context) {
	defer func() {
		pl.mu.Lock()
		pl.stopped = true
		for l, w := range pl.waiters {
			close(w.ch)
			delete(pl.waiters, l)
		}
		pl.mu.Unlock()
		close(pl.done)
	}()
	pause := minPause
	for {
		pl.mu.Lock()
		n := len(pl.waiters)
		pl.mu.Unlock()
		if n == 0 {
			select {
			case <-ctx.Done():
				return
			case <-pl.kick:
			}
		}
		if pl.round(ctx) {
			pause = minPause
		} else {
			pause = min(2*pause, pl.p.cfg.PollInterval)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

const minPause = 5 * time.Millisecond

// round asks for the high watermarks of the waiting logs and wakes those
// that grew; it reports whether it woke any.
func (pl *poller) round(ctx context.Context) bool {
	pl.mu.Lock()
	byTopic := make(map[string][]*kafkaLog, len(pl.waiters))
	for l := range pl.waiters {
		byTopic[l.topic] = append(byTopic[l.topic], l)
	}
	pl.mu.Unlock()
	if len(byTopic) == 0 {
		return false
	}
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	for topic := range byTopic {
		t := kmsg.NewListOffsetsRequestTopic()
		t.Topic = topic
		p := kmsg.NewListOffsetsRequestTopicPartition()
		p.Partition, p.Timestamp, p.CurrentLeaderEpoch = 0, -1, -1 // -1: the high watermark
		t.Partitions = append(t.Partitions, p)
		req.Topics = append(req.Topics, t)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(rctx, pl.p.cl)
	hw := make(map[string]int64, len(byTopic))
	if err == nil {
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if kerr.ErrorForCode(p.ErrorCode) == nil {
					hw[t.Topic] = p.Offset
				}
			}
		}
	}
	woke := false
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for topic, logs := range byTopic {
		h, ok := hw[topic]
		for _, l := range logs {
			w, still := pl.waiters[l]
			// No answer for the topic: wake its Waits, whose fetch reports
			// what is wrong (or finds records after all).
			if still && (!ok || h > w.k) {
				close(w.ch)
				delete(pl.waiters, l)
				woke = true
			}
		}
	}
	return woke
}
