package volume

import "sync"

// idLocks serializes operations on one volume while letting different volumes proceed in
// parallel (a mkfs must not hold up another sandbox's mount).
type idLocks struct {
	mu sync.Mutex
	m  map[string]*idLock
}

type idLock struct {
	sync.Mutex
	refs int
}

// lock takes id's lock and returns the function that releases it.
func (l *idLocks) lock(id string) func() {
	l.mu.Lock()
	if l.m == nil {
		l.m = make(map[string]*idLock)
	}
	k := l.m[id]
	if k == nil {
		k = &idLock{}
		l.m[id] = k
	}
	k.refs++
	l.mu.Unlock()

	k.Lock()
	return func() {
		k.Unlock()
		l.mu.Lock()
		k.refs--
		if k.refs == 0 {
			delete(l.m, id)
		}
		l.mu.Unlock()
	}
}
