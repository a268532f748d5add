package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Node is one machine of a trace.
type Node struct {
	Name      string
	CPUMilli  int64
	MemoryMiB int64
	GPUs      int
	Model     string
}

// Pod is one task of a trace. GPUMilli is the share of one GPU in
// thousandths (1000 = a whole GPU); a pod with GPUs > 1 takes whole GPUs.
type Pod struct {
	Name      string
	CPUMilli  int64
	MemoryMiB int64
	GPUs      int
	GPUMilli  int64
	// Models lists the allowed GPU models; empty allows any.
	Models []string
	// Created and Deleted are the trace's creation and deletion times in
	// seconds, when it has them (HasTimes).
	Created, Deleted int64
	HasTimes         bool
}

// Lifetime returns how long the pod lived in the trace, in seconds, or 0
// without times.
func (p *Pod) Lifetime() int64 {
	if !p.HasTimes {
		return 0
	}
	return max(p.Deleted-p.Created, 0)
}

// RequestedMilli is the pod's GPU demand in thousandths of a GPU.
func (p *Pod) RequestedMilli() int64 {
	if p.GPUs == 0 {
		return 0
	}
	if p.GPUs == 1 {
		return p.GPUMilli
	}
	return int64(p.GPUs) * 1000
}

// GPUMemoryMiB holds the GPU memory sizes the FGD paper's simulator uses
// for the trace's models, which the node list does not carry.
func GPUMemoryMiB(model string) (int64, bool) {
	mib, ok := map[string]int64{
		"G2": 20000, "G3": 30000, "T4": 15109, "P100": 16280,
		"V100M16": 16160, "V100M32": 32510, "A10": 22731,
		// Models of the synthetic cluster.
		"H100": 81559, "A100": 81920, "L4": 23034, "T4-16G": 15360,
	}[model]
	return mib, ok
}

// ReadNodesFile reads a node list CSV (sn, cpu_milli, memory_mib, gpu, model).
func ReadNodesFile(path string) ([]Node, error) {
	_, rows, err := readCSV(path, "sn", "cpu_milli", "memory_mib", "gpu", "model")
	if err != nil {
		return nil, err
	}
	nodes := make([]Node, 0, len(rows))
	for i, r := range rows {
		var ps parser
		n := Node{Name: r[0], Model: r[4], CPUMilli: ps.int(r[1]), MemoryMiB: ps.int(r[2]), GPUs: int(ps.int(r[3]))}
		if ps.err != nil {
			return nil, fmt.Errorf("%s: row %d: %w", path, i+2, ps.err)
		}
		if n.GPUs > 0 {
			if _, ok := GPUMemoryMiB(n.Model); !ok {
				return nil, fmt.Errorf("%s: row %d: unknown GPU model %q", path, i+2, n.Model)
			}
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// ReadPodsFile reads a pod list CSV (name, cpu_milli, memory_mib, num_gpu,
// gpu_milli[, gpu_spec, ...]); creation_time and deletion_time, where the
// header names them, give the pods' times.
func ReadPodsFile(path string) ([]Pod, error) {
	header, rows, err := readCSV(path, "name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
	if err != nil {
		return nil, err
	}
	created, deleted := column(header, "creation_time"), column(header, "deletion_time")
	pods := make([]Pod, 0, len(rows))
	for i, r := range rows {
		var ps parser
		p := Pod{Name: r[0], CPUMilli: ps.int(r[1]), MemoryMiB: ps.int(r[2]), GPUs: int(ps.int(r[3])), GPUMilli: ps.int(r[4])}
		if ps.err != nil {
			return nil, fmt.Errorf("%s: row %d: %w", path, i+2, ps.err)
		}
		if len(r) > 5 && r[5] != "" {
			p.Models = strings.Split(r[5], "|")
		}
		if created >= 0 && deleted >= 0 && created < len(r) && deleted < len(r) && r[created] != "" && r[deleted] != "" {
			p.Created, p.Deleted, p.HasTimes = ps.int(r[created]), ps.int(r[deleted]), true
			if ps.err != nil {
				return nil, fmt.Errorf("%s: row %d: %w", path, i+2, ps.err)
			}
		}
		if p.GPUs < 0 || p.GPUMilli < 0 || p.GPUMilli > 1000 || (p.GPUs > 1 && p.GPUMilli != 1000) || (p.GPUs > 0 && p.GPUMilli == 0) {
			return nil, fmt.Errorf("%s: row %d: invalid GPU request num_gpu=%d gpu_milli=%d", path, i+2, p.GPUs, p.GPUMilli)
		}
		pods = append(pods, p)
	}
	return pods, nil
}

// column returns the index of name in header, or -1.
func column(header []string, name string) int {
	for i, h := range header {
		if h == name {
			return i
		}
	}
	return -1
}

func readCSV(path string, columns ...string) (header []string, rows [][]string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	header, err = r.Read()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: reading header: %w", path, err)
	}
	for i, c := range columns {
		if i >= len(header) || header[i] != c {
			return nil, nil, fmt.Errorf("%s: column %d is %q, want %q", path, i+1, at(header, i), c)
		}
	}
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return header, rows, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(rec) < len(columns) {
			return nil, nil, fmt.Errorf("%s: line %d has %d columns, want at least %d", path, len(rows)+2, len(rec), len(columns))
		}
		rows = append(rows, rec)
	}
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return ""
}

// parser parses integers, keeping the first error.
type parser struct{ err error }

func (p *parser) int(text string) int64 {
	v, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("not an integer: %q", text)
	}
	return v
}
