//go:build !linux

package rolloutdb

func newPlatformNotifier(dirs []string) (dirNotifier, error) { return newFsnotifyNotifier(dirs) }
