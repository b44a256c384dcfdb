package main

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// machine is what the figures were measured on.
type machine struct {
	GOOS      string `json:"goos"`
	GOARCH    string `json:"goarch"`
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"go_version"`
	CPUModel  string `json:"cpu_model,omitempty"`
	Kernel    string `json:"kernel,omitempty"`
	MemMB     int64  `json:"mem_mb,omitempty"`
	Dir       string `json:"dir"`
	FSType    string `json:"fs_type"`
	FSDevice  string `json:"fs_device,omitempty"`
	// FsyncMeaningful is false on memory file systems (tmpfs, ramfs): there
	// fsync costs nothing and durable-append figures mean nothing.
	FsyncMeaningful bool `json:"fsync_meaningful"`
	// ProcIO says whether /proc/self/io write_bytes could be read
	// (written_bytes_per_record).
	ProcIO bool      `json:"proc_io"`
	Time   time.Time `json:"time"`
	// Raw is the disk's limits for durable 1 KiB records at the start of
	// the run (rawdisk.go).
	Raw rawLimits `json:"raw_limits"`
}

func describeMachine(dir string) machine {
	m := machine{
		GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPUs: runtime.NumCPU(), GoVersion: runtime.Version(),
		Dir: dir, Time: time.Now().UTC().Truncate(time.Second),
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				m.MemMB = kb / 1024
			}
		}
	}
	m.FSType, m.FSDevice = fsType(dir)
	m.FsyncMeaningful = m.FSType != "tmpfs" && m.FSType != "ramfs"
	_, m.ProcIO = writeBytes()
	return m
}

// fsType names the file system holding dir: from the longest matching
// mount point in /proc/self/mountinfo, else from statfs's magic number.
func fsType(dir string) (typ, dev string) {
	abs, err := filepath.EvalSymlinks(dir)
	if err != nil {
		abs = dir
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		best := -1
		for line := range strings.Lines(string(b)) {
			// id parent maj:min root mountpoint options [optional...] - fstype source super
			pre, post, ok := strings.Cut(line, " - ")
			f, g := strings.Fields(pre), strings.Fields(post)
			if !ok || len(f) < 5 || len(g) < 2 {
				continue
			}
			mp := unescapeMount(f[4])
			if (abs == mp || strings.HasPrefix(abs, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > best {
				best, typ, dev = len(mp), g[0], g[1]
			}
		}
		if typ != "" {
			return typ, dev
		}
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "unknown", ""
	}
	names := map[int64]string{0xEF53: "ext2/3/4", 0x01021994: "tmpfs", 0x858458f6: "ramfs", 0x58465342: "xfs",
		0x9123683E: "btrfs", 0x794c7630: "overlay", 0x2fc12fc1: "zfs", 0x6969: "nfs", 0xF2F52010: "f2fs", 0x65735546: "fuse"}
	if n, ok := names[int64(st.Type)]; ok {
		return n, ""
	}
	return "0x" + strconv.FormatInt(int64(st.Type), 16), ""
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// writeBytes is the process's write_bytes from /proc/self/io: bytes it
// caused to be sent to storage (counted when pages are dirtied), for every
// thread of the process.
func writeBytes() (int64, bool) {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("write_bytes:")); ok {
			v, err := strconv.ParseInt(string(bytes.TrimSpace(rest)), 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}

// dirSize is the sum of the sizes of the regular files under dir.
func dirSize(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			total += fi.Size()
		}
		return nil
	})
	return total, err
}

// fileSize is the size of each named file that exists, summed.
func fileSize(paths ...string) int64 {
	var total int64
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil {
			total += fi.Size()
		}
	}
	return total
}

// percentile is the nearest-rank percentile of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return percentile(s, 50)
}

// syncDir makes a directory's entries durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
