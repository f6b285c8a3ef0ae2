package manager

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// cgroupV1Unlimited is what cgroup v1 reports for "no limit" (a page-aligned
// MaxInt64); anything at or above it is no limit.
const cgroupV1Unlimited = 1 << 62

// CgroupMemoryLimit returns the memory limit of the cgroup this process runs
// in, read under root (normally /sys/fs/cgroup): cgroup v2's memory.max, or
// cgroup v1's memory/memory.limit_in_bytes. ok is false when there is none.
func CgroupMemoryLimit(root string) (limit int64, ok bool, err error) {
	for _, f := range []string{"memory.max", filepath.Join("memory", "memory.limit_in_bytes")} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return 0, false, err
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, false, nil
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("%s: %w", f, err)
		}
		if v <= 0 || v >= cgroupV1Unlimited {
			return 0, false, nil
		}
		return v, true, nil
	}
	return 0, false, nil
}

// SetMemoryLimit gives the Go runtime a soft memory limit of ratio times the
// container's memory limit, so the garbage collector works harder before
// the container is OOM-killed (a burst of new runs, a restart that lists
// every object). An explicit GOMEMLIMIT, a ratio outside (0, 1], or no
// cgroup limit leave the runtime as it is. It returns the limit set, 0 if
// none, and a sentence for the log.
func SetMemoryLimit(root string, ratio float64) (int64, string) {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		return 0, "GOMEMLIMIT=" + v + " is set; using it"
	}
	if ratio <= 0 || ratio > 1 {
		return 0, "no soft memory limit (--memory-limit-ratio is 0)"
	}
	limit, ok, err := CgroupMemoryLimit(root)
	if err != nil {
		return 0, "no soft memory limit: reading the cgroup's: " + err.Error()
	}
	if !ok {
		return 0, "no soft memory limit: the container has no memory limit"
	}
	soft := int64(float64(limit) * ratio)
	debug.SetMemoryLimit(soft)
	return soft, fmt.Sprintf("soft memory limit %d MiB (%.0f%% of the container's %d MiB)", soft>>20, 100*ratio, limit>>20)
}
