package cache

import "time"

func init() { verifySummaries = true }

// SetClock replaces the clock live samples are judged by.
func (c *Cache) SetClock(now func() time.Time) { c.now = now }

// Objects returns how many Node objects the cache finds entries by.
func (c *Cache) Objects() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.objects)
}

// InlineName returns how many bytes of the named node's name its entry
// holds in itself, and whether the cache has the node.
func (c *Cache) InlineName(name string) (int, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e := c.nodes[name]
	if e == nil {
		return 0, false
	}
	return int(e.shortLen), true
}
