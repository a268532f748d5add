package cache

import "time"

// SetClock replaces the clock live samples are judged by.
func (c *Cache) SetClock(now func() time.Time) { c.now = now }
