package fleet

// Followers returns the number of this Log's open followers.
func (l *Log) Followers() int64 {
	lv := &l.live
	lv.Lock()
	defer lv.Unlock()
	n := 0
	for _, set := range lv.followers {
		n += len(set)
	}
	return int64(n)
}
