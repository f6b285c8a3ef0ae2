package manager

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCgroupMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name, file, content string
		want                int64
		ok, wantErr         bool
	}{
		{name: "v2 limit", file: "memory.max", content: "536870912\n", want: 512 << 20, ok: true},
		{name: "v2 none", file: "memory.max", content: "max\n"},
		{name: "v1 limit", file: "memory/memory.limit_in_bytes", content: "268435456\n", want: 256 << 20, ok: true},
		{name: "v1 none", file: "memory/memory.limit_in_bytes", content: "9223372036854771712\n"},
		{name: "no cgroup files"},
		{name: "garbage", file: "memory.max", content: "lots\n", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.file != "" {
				writeFile(t, filepath.Join(root, tc.file), tc.content)
			}
			got, ok, err := CgroupMemoryLimit(root)
			if (err != nil) != tc.wantErr || got != tc.want || ok != tc.ok {
				t.Fatalf("CgroupMemoryLimit = %d, %v, %v; want %d, %v, error %v", got, ok, err, tc.want, tc.ok, tc.wantErr)
			}
		})
	}
}

func TestSetMemoryLimit(t *testing.T) {
	t.Cleanup(func() { debug.SetMemoryLimit(math.MaxInt64) })
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "memory.max"), "536870912\n")
	t.Setenv("GOMEMLIMIT", "")

	ratio := 0.9
	got, msg := SetMemoryLimit(root, ratio)
	if want := int64(ratio * float64(512<<20)); got != want || debug.SetMemoryLimit(-1) != want {
		t.Fatalf("SetMemoryLimit = %d (%s), runtime limit %d; want %d", got, msg, debug.SetMemoryLimit(-1), want)
	}

	debug.SetMemoryLimit(math.MaxInt64)
	if got, msg := SetMemoryLimit(root, 0); got != 0 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Fatalf("ratio 0 set %d (%s)", got, msg)
	}
	t.Setenv("GOMEMLIMIT", "300MiB")
	if got, msg := SetMemoryLimit(root, 0.9); got != 0 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Fatalf("an explicit GOMEMLIMIT was overridden: %d (%s)", got, msg)
	}
}
