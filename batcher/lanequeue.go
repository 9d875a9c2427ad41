package batcher

import "math/bits"

// fifo is a queue of calls backed by a slice that is reused once drained.
// An entry is nil once killed (a tombstone). Entries are numbered from
// the fifo's start (modulo 2³², far beyond any queue's length): off is
// the number of items[0].
type fifo struct {
	items []*Call
	head  int
	off   uint32
}

func (q *fifo) len() int       { return len(q.items) - q.head }
func (q *fifo) at(i int) *Call { return q.items[q.head+i] }
func (q *fifo) peek() *Call    { return q.items[q.head] }

// first returns the first call that is not a tombstone, or nil.
func (q *fifo) first() *Call {
	for _, c := range q.items[q.head:] {
		if c != nil {
			return c
		}
	}
	return nil
}

// push appends c and returns its entry's number.
func (q *fifo) push(c *Call) uint32 {
	q.items = append(q.items, c)
	return q.off + uint32(len(q.items)-1)
}

// kill makes entry e, which holds c, a tombstone.
func (q *fifo) kill(e uint32, c *Call) {
	if i := int(e - q.off); i >= q.head && i < len(q.items) && q.items[i] == c {
		q.items[i] = nil
	}
}

func (q *fifo) pop() {
	q.items[q.head] = nil
	q.head++
	switch {
	case q.head == len(q.items):
		q.off += uint32(len(q.items))
		q.items, q.head = q.items[:0], 0
	case q.head > 1024 && q.head*2 > len(q.items):
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.off += uint32(q.head)
		q.items, q.head = q.items[:n], 0
	}
}

// deadlineHeap orders queued calls by deadline, earliest first; it keeps
// Call.heapIdx. Its methods are container/heap's algorithms written for
// *Call, so that the owner's per-call pushes and removals make no
// interface calls.
type deadlineHeap []*Call

func (h deadlineHeap) less(i, j int) bool { return h[i].deadline < h[j].deadline }

func (h deadlineHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}

// push adds c.
func (h *deadlineHeap) push(c *Call) {
	c.heapIdx = len(*h)
	*h = append(*h, c)
	h.up(len(*h) - 1)
}

// remove takes out the call at index i.
func (h *deadlineHeap) remove(i int) {
	n := len(*h) - 1
	if n != i {
		h.swap(i, n)
		if !h.down(i, n) {
			h.up(i)
		}
	}
	old := *h
	old[n] = nil
	*h = old[:n]
}

// removeAll takes out calls, which are all in h. Taking many out by
// compacting and re-heaping costs O(len(h)), where one at a time costs
// O(len(calls)·log len(h)): it picks the cheaper.
func (h *deadlineHeap) removeAll(calls []*Call) {
	n := len(*h)
	if len(calls)*bits.Len(uint(n)) < n {
		for _, c := range calls {
			h.remove(c.heapIdx)
		}
		return
	}
	for _, c := range calls {
		c.heapIdx = -1
	}
	s := *h
	k := 0
	for _, c := range s {
		if c.heapIdx >= 0 {
			c.heapIdx = k
			s[k] = c
			k++
		}
	}
	clear(s[k:])
	s = s[:k]
	for i := k/2 - 1; i >= 0; i-- {
		s.down(i, k)
	}
	*h = s
}

func (h deadlineHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2 // parent
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

// down sifts the call at i0 down within the first n; it reports whether
// the call moved.
func (h deadlineHeap) down(i0, n int) bool {
	i := i0
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 {
			break
		}
		j := j1 // left child
		if j2 := j1 + 1; j2 < n && h.less(j2, j1) {
			j = j2 // right child
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}
