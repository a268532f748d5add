//go:build gpucheck

package gpucheck

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpushare/gpushare/pkg/gpu"
	gpunvml "github.com/gpushare/gpushare/pkg/gpu/nvml"
)

// The modes: the machine's GPUs through its driver, or the fake.
const (
	modeNVML = "nvml"
	modeFake = "fake"
)

// More of the environment the checks read.
const (
	// envGPU is the index of the GPU the usage and MPS checks use (0).
	envGPU = "GPUSHARE_GPU_CHECK_GPU"
	// envWorkload picks the CUDA process: cupy, pytorch or nvcc (the
	// first that runs, in that order).
	envWorkload = "GPUSHARE_GPU_CHECK_WORKLOAD"
	// envShm=off keeps the MPS daemon on the node's /dev/shm even as
	// root.
	envShm = "GPUSHARE_GPU_CHECK_SHM"
)

// testdata holds the stand-ins and the CUDA programs, written out where
// they run: the test binary needs no checkout.
//
//go:embed testdata
var testdata embed.FS

// machine is what the checks run against: the machine's driver, GPUs,
// nvidia-smi and MPS, or the fake ones.
type machine struct {
	// lib is the NVML the backend runs over, which the event check also
	// calls directly.
	lib     nvml.Interface
	backend gpu.Backend
	driver  string
	// smi is nvidia-smi (or its stand-in); "" if there is none.
	smi string
	// control is the MPS control binary; "" if there is none, and
	// noControl says why.
	control, noControl string
	// hamiCore is HAMi-core's libvgpu.so (or its stand-in); "" if there
	// is none, and noHAMiCore says why.
	hamiCore, noHAMiCore string
	// work starts CUDA processes; nil if none can run, and noWork says
	// why.
	work   *workload
	noWork string
	// fake is the fake driver; nil on a real machine.
	fake *fakeNVML
	dir  string
}

// against is what each section says it ran against.
func (m *machine) against() string {
	if m.fake != nil {
		return "fake"
	}
	return "real"
}

// newMachine opens the machine of mode.
func newMachine(t *testing.T, mode string) (*machine, error) {
	m := &machine{dir: t.TempDir()}
	switch mode {
	case modeFake:
		f, err := newFakeNVML(fakeGPUs(), filepath.Join(m.dir, "driver"))
		if err != nil {
			return nil, err
		}
		m.fake, m.lib = f, f.lib
		if m.smi, err = f.writeSMI(m.dir); err != nil {
			return nil, err
		}
		if m.control, err = writeTestdata(m.dir, "fake-mps-control.sh"); err != nil {
			return nil, err
		}
		client, err := writeTestdata(m.dir, "fake-cuda-client.sh")
		if err != nil {
			return nil, err
		}
		m.work = &workload{impl: "fake", desc: "fake: a stand-in script, no CUDA", argv: []string{client},
			env: []string{"GPUSHARE_FAKE_GPU_STATE=" + f.state}}
		if m.hamiCore, err = buildStandInLibrary(t.Context(), m.dir); err != nil {
			return nil, err
		}
	case modeNVML:
		m.lib = nvml.New()
		// Without nvidia-smi, the inventory check fails: nothing to
		// compare with.
		if path, err := exec.LookPath("nvidia-smi"); err == nil {
			m.smi = path
		}
		if path, err := exec.LookPath("nvidia-cuda-mps-control"); err == nil {
			m.control = path
		} else {
			m.noControl = "nvidia-cuda-mps-control is not on PATH"
		}
		m.hamiCore, m.noHAMiCore = findHAMiCore()
	default:
		return nil, fmt.Errorf("%s=%q: want %s or %s", envMode, mode, modeNVML, modeFake)
	}
	b, err := gpunvml.NewWithLibrary(m.lib)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("closing NVML: %v", err)
		}
	})
	m.backend = b
	driver, ret := m.lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML driver version: %s", nvml.ErrorString(ret))
	}
	m.driver = driver
	if m.fake == nil {
		ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
		defer cancel()
		m.work, m.noWork = findWorkload(ctx, t, m.dir)
	}
	return m, nil
}

// target is the GPU the usage and MPS checks use: index $GPUSHARE_GPU_CHECK_GPU (0).
func (m *machine) target() (gpu.Device, error) {
	index := 0
	if v := os.Getenv(envGPU); v != "" {
		var err error
		if index, err = strconv.Atoi(v); err != nil {
			return gpu.Device{}, fmt.Errorf("%s=%q: %w", envGPU, v, err)
		}
	}
	devs, err := m.backend.Devices()
	if err != nil {
		return gpu.Device{}, err
	}
	for _, d := range devs {
		if d.Index == index {
			if !d.Healthy {
				return d, fmt.Errorf("GPU %d (%s) is unhealthy", d.Index, d.UUID)
			}
			return d, nil
		}
	}
	return gpu.Device{}, fmt.Errorf("no GPU %d among %d", index, len(devs))
}

// writeTestdata writes testdata/name into dir, executable, and returns
// its path.
func writeTestdata(dir, name string) (string, error) {
	b, err := testdata.ReadFile("testdata/" + name)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	return path, os.WriteFile(path, b, 0o755) //nolint:gosec // a script the check runs
}

// findWorkload finds a CUDA process to run: python3 with CuPy or
// PyTorch, else workload.cu built with nvcc; nil and why not if none
// runs.
func findWorkload(ctx context.Context, t *testing.T, dir string) (*workload, string) {
	want := os.Getenv(envWorkload)
	var why []string
	if want == "" || want == "cupy" || want == "pytorch" {
		if py, err := exec.LookPath("python3"); err != nil {
			why = append(why, "no python3")
		} else if script, err := writeTestdata(dir, "workload.py"); err != nil {
			why = append(why, err.Error())
		} else {
			w := &workload{argv: []string{py, script}, canTime: true}
			if err := w.probe(ctx); err != nil {
				why = append(why, "python3: "+err.Error())
			} else {
				w.desc = w.impl + " (python3)"
				return w, ""
			}
		}
	}
	if want == "" || want == "nvcc" {
		w, err := buildWorkload(ctx, t, dir)
		if err != nil {
			why = append(why, err.Error())
		} else {
			return w, ""
		}
	}
	if len(why) == 0 {
		why = append(why, fmt.Sprintf("%s=%q: want cupy, pytorch or nvcc", envWorkload, want))
	}
	return nil, "no CUDA process to run: " + strings.Join(why, "; ")
}

// buildWorkload builds workload.cu with nvcc.
func buildWorkload(ctx context.Context, t *testing.T, dir string) (*workload, error) {
	nvcc, err := exec.LookPath("nvcc")
	if err != nil {
		if _, serr := os.Stat("/usr/local/cuda/bin/nvcc"); serr != nil {
			return nil, errors.New("no nvcc")
		}
		nvcc = "/usr/local/cuda/bin/nvcc"
	}
	src, err := writeTestdata(dir, "workload.cu")
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "workload")
	t.Logf("building the CUDA workload: %s -O2 -o %s %s", nvcc, bin, src)
	if out, err := exec.CommandContext(ctx, nvcc, "-O2", "-o", bin, src).CombinedOutput(); err != nil { //nolint:gosec // the CUDA compiler
		return nil, fmt.Errorf("nvcc: %w: %s", err, tail(string(out)))
	}
	w := &workload{argv: []string{bin}, canTime: true, desc: "nvcc (workload.cu built here)"}
	if err := w.probe(ctx); err != nil {
		return nil, fmt.Errorf("nvcc-built workload: %w", err)
	}
	return w, nil
}

// findHAMiCore finds HAMi-core's library: $GPUSHARE_GPU_CHECK_HAMI_CORE,
// else where HAMi installs it; "" and why not if neither is there.
func findHAMiCore() (string, string) {
	path := os.Getenv(envHAMiCore)
	if path == "" {
		if _, err := os.Stat(hamiCoreInstalled); err != nil {
			return "", "no HAMi-core library: set " + envHAMiCore + " to its libvgpu.so (HAMi installs it at " + hamiCoreInstalled + ")"
		}
		return hamiCoreInstalled, ""
	}
	if !filepath.IsAbs(path) {
		return "", envHAMiCore + "=" + path + ": want an absolute path"
	}
	if _, err := os.Stat(path); err != nil {
		return "", envHAMiCore + ": " + err.Error()
	}
	return path, ""
}

// buildStandInLibrary builds testdata/fake-libvgpu.c, HAMi-core's
// stand-in, into dir with the C compiler (the check's build needs one).
func buildStandInLibrary(ctx context.Context, dir string) (string, error) {
	src, err := writeTestdata(dir, "fake-libvgpu.c")
	if err != nil {
		return "", err
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	lib := filepath.Join(dir, "libvgpu.so")
	if out, err := exec.CommandContext(ctx, cc, "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil { //nolint:gosec // the C compiler
		return "", fmt.Errorf("building the stand-in libvgpu.so with %s: %w: %s", cc, err, tail(string(out)))
	}
	return lib, nil
}

// tail is the end of a process's output, for messages.
func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 600 {
		s = "..." + s[len(s)-600:]
	}
	return s
}
