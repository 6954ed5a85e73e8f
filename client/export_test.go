package client

import "time"

// Refusals returns how many refusals c remembers.
func (c *Client) Refusals() int {
	if c.refusals == nil {
		return 0
	}
	return c.refusals.len()
}

// RefusalKey exports refusalKey.
var RefusalKey = refusalKey

// LocalHeaders exports localHeaders.
var LocalHeaders = localHeaders

// CountDownT exports countDownT.
var CountDownT = countDownT

// Seconds exports seconds.
var Seconds = seconds

// Check exports check.
var Check = check

// Request exports request.
var Request = request

// GatedListener exports gatedListener, for the tests of cold connections.
type GatedListener = gatedListener

// ListenGated exports listenGated.
var ListenGated = listenGated

// SetTimer makes c start its timers with timer.
func SetTimer(c *Client, timer func(d time.Duration) (<-chan time.Time, func() bool)) {
	c.timer = timer
}
