package fleet

// Followers returns the number of this Log's open followers.
func (l *Log) Followers() int64 {
	lv := &l.live
	lv.Lock()
	defer lv.Unlock()
	n := 0
	for _, ft := range lv.threads {
		n += len(ft.followers)
	}
	return int64(n)
}
