package cdi

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckHAMiCoreLibrary: a library that exports HAMi-core's hooks
// passes; one built with them hidden, one without them, and a file that
// is no library are refused with the reason.
func TestCheckHAMiCoreLibrary(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Fatalf("a C compiler builds the libraries (the project's cgo build needs one too): %v", err)
	}
	dir := t.TempDir()
	hooks := "int cuMemAlloc_v2(void **p, unsigned long n) { return 2; }\nint cuLaunchKernel(void) { return 0; }\n"
	build := func(name, src string, flags ...string) string {
		t.Helper()
		c := filepath.Join(dir, name+".c")
		if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		lib := filepath.Join(dir, name+".so")
		args := append([]string{"-shared", "-fPIC", "-o", lib, c}, flags...)
		if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", name, err, out)
		}
		return lib
	}
	garbage := filepath.Join(dir, "garbage.so")
	if err := os.WriteFile(garbage, []byte("\x7fELF but no more"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, lib, want string
	}{
		{"exported", build("exported", hooks), ""},
		{"hidden", build("hidden", hooks, "-fvisibility=hidden"), "does not export cuMemAlloc_v2"},
		{"no launch hook", build("memonly", "int cuMemAlloc_v2(void **p, unsigned long n) { return 2; }\n"), "does not export cuLaunchKernel"},
		{"not a library", garbage, "is not a shared library"},
		{"missing", filepath.Join(dir, "absent.so"), "is not a shared library"},
	} {
		err := CheckHAMiCoreLibrary(c.lib)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v; want %q", c.name, err, c.want)
		}
	}
}

// TestFindHAMiCoreLibrary: the file named is taken where it is; where it
// is not, the newest versioned file beside it (HAMi installs
// libvgpu.so.<version>), by version and not by name; with neither, the
// error says what was looked for.
func TestFindHAMiCoreLibrary(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libvgpu.so")
	touch := func(names ...string) {
		t.Helper()
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := FindHAMiCoreLibrary(lib); err == nil || !strings.Contains(err.Error(), "nor any libvgpu.so.<version> beside it") {
		t.Errorf("no library: %v, want an error naming what was looked for", err)
	}
	touch("libvgpu.so.v2.9.0", "libvgpu.so.v2.10.1", "libvgpu.so.bak", "libvgpu.so.v2.8.0")
	if err := os.Mkdir(filepath.Join(dir, "libvgpu.so.v3.0.0"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := FindHAMiCoreLibrary(lib); err != nil || got != lib+".v2.10.1" {
		t.Errorf("versioned files only: %q, %v; want the newest, %s.v2.10.1", got, err, lib)
	}
	touch("libvgpu.so")
	if got, err := FindHAMiCoreLibrary(lib); err != nil || got != lib {
		t.Errorf("with the file named: %q, %v; want it", got, err)
	}
}
