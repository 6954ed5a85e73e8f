package memory

// Holds reports whether s holds a counter for key, in its window or its
// main region, without counting a sighting of it: for tests that watch
// how long a key stays.
func Holds(s *Store, key string) bool {
	k := s.hash(key)
	sh := &s.shards[k[0]&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	_, ok := sh.m[k]
	return ok
}
