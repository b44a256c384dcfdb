package fleet

// WithTestDSNs has a Log's notifier and listener connect to notify and
// listen (a proxy, for a fault of theirs alone) instead of the pool's
// server; "" keeps it.
func WithTestDSNs(o Options, notify, listen string) Options {
	o.testing.notifyDSN, o.testing.listenDSN = notify, listen
	return o
}
