package fleet

// WithTestDSN has a Log's notifier connect to notify (a proxy, for a
// fault of its alone) instead of the pool's server.
func WithTestDSN(o Options, notify string) Options {
	o.testing.notifyDSN = notify
	return o
}
