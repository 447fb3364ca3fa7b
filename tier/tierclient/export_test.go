package tierclient

// CachedTargets is how many targets c keeps an entry of.
func CachedTargets(c *Client) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mu.targets)
}
