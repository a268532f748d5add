//go:build gpucheck

package gpucheck

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// smiFields are the fields the checks query from nvidia-smi.
var smiFields = []string{"index", "uuid", "name", "driver_version", "memory.total", "memory.reserved", "pci.bus_id"}

// smiGPU is one GPU as nvidia-smi lists it.
type smiGPU struct {
	Index                 int
	UUID, Name, Driver    string
	TotalMiB, ReservedMiB int64 // ReservedMiB -1: not reported
	// BusID is in sysfs form ("0000:17:00.0"); NUMANode is the kernel's
	// for that bus (-1 if none).
	BusID    string
	NUMANode int
	// Peers are the GPUs nvidia-smi topo -m joins to this one by NVLink.
	Peers []int
}

// smiInventory is nvidia-smi's answer.
type smiInventory struct {
	GPUs []smiGPU
	// Topo is why nvidia-smi topo -m could not be read; nil if it was.
	Topo error
}

// readSMI asks nvidia-smi for the GPUs and their NVLinks. A driver too
// old to report memory.reserved is asked again without it.
func readSMI(ctx context.Context, smi string) (smiInventory, error) {
	fields := smiFields
	out, err := run(ctx, smi, "--query-gpu="+strings.Join(fields, ","), "--format=csv,noheader,nounits")
	if err != nil && strings.Contains(err.Error(), "memory.reserved") {
		fields = slices.DeleteFunc(slices.Clone(fields), func(f string) bool { return f == "memory.reserved" })
		out, err = run(ctx, smi, "--query-gpu="+strings.Join(fields, ","), "--format=csv,noheader,nounits")
	}
	if err != nil {
		return smiInventory{}, err
	}
	gpus, err := parseSMIQuery(out, fields)
	if err != nil {
		return smiInventory{}, err
	}
	for i := range gpus {
		gpus[i].NUMANode = sysfsNUMA(gpus[i].BusID)
	}
	inv := smiInventory{GPUs: gpus}
	out, err = run(ctx, smi, "topo", "-m")
	if err != nil {
		inv.Topo = err
		return inv, nil
	}
	peers, err := parseTopo(out)
	if err != nil {
		inv.Topo = fmt.Errorf("nvidia-smi topo -m: %w", err)
		return inv, nil
	}
	for i := range inv.GPUs {
		inv.GPUs[i].Peers = peers[inv.GPUs[i].Index]
	}
	return inv, nil
}

func run(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput() //nolint:gosec // nvidia-smi
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", filepath.Base(name), strings.Join(args, " "), err, tail(string(out)))
	}
	return string(out), nil
}

// parseSMIQuery reads nvidia-smi --query-gpu=fields
// --format=csv,noheader,nounits.
func parseSMIQuery(out string, fields []string) ([]smiGPU, error) {
	var gpus []smiGPU
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		values := strings.Split(line, ",")
		if len(values) != len(fields) {
			return nil, fmt.Errorf("nvidia-smi line %q: %d values, want %d (%s)", line, len(values), len(fields), strings.Join(fields, ","))
		}
		g := smiGPU{ReservedMiB: -1, NUMANode: -1}
		for i, f := range fields {
			v := strings.TrimSpace(values[i])
			known := v != "" && !strings.HasPrefix(v, "[") && v != "N/A"
			var err error
			switch f {
			case "index":
				g.Index, err = strconv.Atoi(v)
			case "uuid":
				g.UUID = v
			case "name":
				g.Name = v
			case "driver_version":
				g.Driver = v
			case "memory.total":
				g.TotalMiB, err = strconv.ParseInt(v, 10, 64)
			case "memory.reserved":
				if known {
					g.ReservedMiB, err = strconv.ParseInt(v, 10, 64)
				}
			case "pci.bus_id":
				g.BusID = sysfsBusID(v)
			}
			if err != nil {
				return nil, fmt.Errorf("nvidia-smi line %q: %s: %w", line, f, err)
			}
		}
		gpus = append(gpus, g)
	}
	if len(gpus) == 0 {
		return nil, errors.New("nvidia-smi lists no GPU")
	}
	return gpus, nil
}

// sysfsBusID turns nvidia-smi's bus ID ("00000000:17:00.0") into sysfs
// form ("0000:17:00.0").
func sysfsBusID(id string) string {
	id = strings.ToLower(id)
	if len(id) > 12 {
		id = id[len(id)-12:]
	}
	return id
}

// sysfsNUMA is the kernel's NUMA node of a PCI device; -1 if none.
func sysfsNUMA(bus string) int {
	b, err := os.ReadFile(filepath.Join("/sys/bus/pci/devices", bus, "numa_node"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return -1
	}
	return n
}

var (
	ansiEscape = regexp.MustCompile("\x1b\\[[0-9;]*m")
	gpuColumn  = regexp.MustCompile(`^GPU(\d+)$`)
)

// parseTopo reads nvidia-smi topo -m: for each GPU index, the GPUs its
// row joins to it by NVLink ("NV#").
func parseTopo(out string) (map[int][]int, error) {
	lines := strings.Split(ansiEscape.ReplaceAllString(out, ""), "\n")
	n := -1
	peers := map[int][]int{}
	for _, line := range lines {
		tokens := strings.Fields(line)
		if len(tokens) == 0 {
			continue
		}
		if n < 0 {
			// The header: GPU0 GPU1 ... then NICs and affinities.
			n = 0
			for _, tok := range tokens {
				if tok != fmt.Sprintf("GPU%d", n) {
					break
				}
				n++
			}
			if n == 0 {
				return nil, fmt.Errorf("header %q names no GPU", line)
			}
			continue
		}
		match := gpuColumn.FindStringSubmatch(tokens[0])
		if match == nil {
			continue
		}
		if len(tokens) < 1+n {
			return nil, fmt.Errorf("row %q: %d columns, want %d GPUs", line, len(tokens)-1, n)
		}
		i, _ := strconv.Atoi(match[1])
		peers[i] = []int{}
		for j, v := range tokens[1 : 1+n] {
			if strings.HasPrefix(v, "NV") && j != i {
				peers[i] = append(peers[i], j)
			}
		}
	}
	if n <= 0 || len(peers) != n {
		return nil, fmt.Errorf("%d GPU rows for %d GPU columns", len(peers), max(n, 0))
	}
	return peers, nil
}

// A topo -m from a machine of eight NVSwitch-joined GPUs and NICs,
// underlined as nvidia-smi underlines its header, and one from a machine
// of two GPUs without NVLink.
func TestParseTopo(t *testing.T) {
	for name, tc := range map[string]struct {
		out  string
		want map[int][]int
	}{
		"two GPUs on PCIe": {
			out:  "\t\x1b[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\nGPU0\t X \tSYS\t0-15\t0\t\tN/A\nGPU1\tSYS\t X \t16-31\t1\t\tN/A\n\nLegend:\n\n  X    = Self\n",
			want: map[int][]int{0: {}, 1: {}},
		},
		"four GPUs, NVLink pairs, a NIC": {
			out: "\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n" +
				"GPU0\t X \tNV12\tSYS\tSYS\tPXB\t0-55,112-167\t0\t\tN/A\n" +
				"GPU1\tNV12\t X \tSYS\tSYS\tPXB\t0-55,112-167\t0\t\tN/A\n" +
				"GPU2\tSYS\tSYS\t X \tNV12\tSYS\t56-111,168-223\t1\t\tN/A\n" +
				"GPU3\tSYS\tSYS\tNV12\t X \tSYS\t56-111,168-223\t1\t\tN/A\n" +
				"NIC0\tPXB\tPXB\tSYS\tSYS\t X \t\t\t\t\n\nLegend:\n\n  NV#  = Connection traversing a bonded set of # NVLinks\n\nNIC Legend:\n\n  NIC0: mlx5_0\n",
			want: map[int][]int{0: {1}, 1: {0}, 2: {3}, 3: {2}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := parseTopo(tc.out)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("parseTopo = %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := parseTopo("No devices were found\n"); err == nil {
		t.Error("parseTopo of nvidia-smi without GPUs: no error")
	}
}

func TestParseSMIQuery(t *testing.T) {
	out := "0, GPU-5e3a1c1e-8f0b-4a8e-9a56-1d2c3b4a5f60, NVIDIA H100 80GB HBM3, 570.124.06, 81559, 330, 00000000:1B:00.0\n" +
		"1, GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9, Tesla T4, 570.124.06, 15360, [N/A], 00000000:3B:00.0\n"
	got, err := parseSMIQuery(out, smiFields)
	if err != nil {
		t.Fatal(err)
	}
	want := []smiGPU{
		{Index: 0, UUID: "GPU-5e3a1c1e-8f0b-4a8e-9a56-1d2c3b4a5f60", Name: "NVIDIA H100 80GB HBM3", Driver: "570.124.06",
			TotalMiB: 81559, ReservedMiB: 330, BusID: "0000:1b:00.0", NUMANode: -1},
		{Index: 1, UUID: "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9", Name: "Tesla T4", Driver: "570.124.06",
			TotalMiB: 15360, ReservedMiB: -1, BusID: "0000:3b:00.0", NUMANode: -1},
	}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("parseSMIQuery =\n%+v\nwant\n%+v", got, want)
	}
	if _, err := parseSMIQuery("0, GPU-x, T4\n", smiFields); err == nil {
		t.Error("a line short of fields: no error")
	}
}
