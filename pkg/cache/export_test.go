package cache

import "time"

// SetClock replaces the clock live samples are judged by.
func (c *Cache) SetClock(now func() time.Time) { c.now = now }

// Objects returns how many Node objects the cache finds entries by.
func (c *Cache) Objects() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.objects)
}
