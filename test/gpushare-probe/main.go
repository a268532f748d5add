// Command gpushare-probe is the workload of gpushare's real-node tests:
// one static binary in a small image (hack/image, gpushare-probe) that
// stands in for the seed examples' images, whose commands (sleep, true,
// sh and bash) link to it. Named by argv[0] or its first argument it
// behaves as
//
//	sleep N|infinity   sleeps, until SIGTERM
//	true               exits 0
//	report [PATH...]   prints, as JSON, what the container sees of its
//	                   GPUs: the environment gpushare and its peers set,
//	                   the NVIDIA device nodes under /dev, and whether
//	                   each PATH exists and what is in it
//	crash              exits 1 after printing its GPUs (a crash loop)
//
// Run as nvidia-cuda-mps-control it stands in for the MPS control
// daemon and client (mps.go).
//
// and otherwise (no arguments, as the pod sandbox, a seed's own
// arguments such as "nbody -benchmark", or a shell's script) waits until
// SIGTERM.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	args := os.Args
	if filepath.Base(args[0]) == "nvidia-cuda-mps-control" {
		os.Exit(mpsControl(args[1:]))
	}
	if name := filepath.Base(args[0]); name == "sleep" || name == "true" {
		args = append([]string{name}, args[1:]...)
	} else {
		args = args[1:]
	}
	os.Exit(run(args))
}

func run(args []string) int {
	verb := ""
	if len(args) > 0 {
		verb = args[0]
	}
	switch verb {
	case "true":
		return 0
	case "report":
		if err := json.NewEncoder(os.Stdout).Encode(look(args[1:])); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	case "crash":
		fmt.Println(os.Getenv("NVIDIA_VISIBLE_DEVICES"))
		return 1
	case "sleep":
		if len(args) > 1 && args[1] != "infinity" {
			secs, err := strconv.ParseFloat(args[1], 64)
			if err != nil {
				fmt.Fprintf(os.Stderr, "sleep: %v\n", err)
				return 2
			}
			return wait(time.Duration(secs * float64(time.Second)))
		}
	}
	return wait(0)
}

// wait returns after d, or at SIGTERM or SIGINT; d 0 is forever. As PID 1
// a process gets no default signal handling, so it must catch them.
func wait(d time.Duration) int {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	var timeout <-chan time.Time
	if d > 0 {
		timeout = time.After(d)
	}
	select {
	case <-sig:
	case <-timeout:
	}
	return 0
}

// A Report is what a container sees.
type Report struct {
	// Env holds the variables that name GPUs or shares of them.
	Env map[string]string `json:"env"`
	// Devices are /dev's NVIDIA device nodes, "name major:minor".
	Devices []string `json:"devices"`
	// Paths maps each asked-for path to its entries' names, or to nil
	// if it does not exist.
	Paths map[string][]string `json:"paths"`
}

var prefixes = []string{"NVIDIA_", "CUDA_", "ALIYUN_COM_", "GPUSHARE_", "ELASTIC_"}

func look(paths []string) Report {
	r := Report{Env: map[string]string{}, Paths: map[string][]string{}}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(k, p) }) {
			r.Env[k] = v
		}
	}
	entries, _ := os.ReadDir("/dev")
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "nvidia") {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat("/dev/"+e.Name(), &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFCHR {
			continue
		}
		major, minor := unix(st.Rdev)
		r.Devices = append(r.Devices, fmt.Sprintf("%s %d:%d", e.Name(), major, minor))
	}
	for _, p := range paths {
		entries, err := os.ReadDir(p)
		if err != nil {
			if _, statErr := os.Stat(p); statErr != nil {
				r.Paths[p] = nil
				continue
			}
		}
		names := []string{}
		for _, e := range entries {
			names = append(names, e.Name())
		}
		r.Paths[p] = names
	}
	return r
}

// unix splits a Linux device number into major and minor.
func unix(dev uint64) (uint64, uint64) {
	major := (dev>>8)&0xfff | (dev>>32)&^0xfff
	minor := dev&0xff | (dev>>12)&^0xff
	return major, minor
}
