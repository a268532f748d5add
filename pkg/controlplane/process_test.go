package controlplane

import (
	"errors"
	"net"
	"slices"
	"testing"
)

// portListener is a listener on a port that was never bound.
type portListener struct{ port int }

func (l portListener) Accept() (net.Conn, error) { return nil, errors.New("not listening") }
func (l portListener) Close() error              { return nil }
func (l portListener) Addr() net.Addr            { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: l.port} }

// kernel replaces listen with one that hands out ports in order, as a
// kernel may hand a closed port out again, and restores both it and the
// ports handed out when the test ends.
func kernel(t *testing.T, ports ...int) {
	t.Helper()
	saved := listen
	handedOut.Lock()
	savedPorts := handedOut.ports
	handedOut.ports = nil
	handedOut.Unlock()
	t.Cleanup(func() {
		listen = saved
		handedOut.Lock()
		handedOut.ports = savedPorts
		handedOut.Unlock()
	})
	listen = func(string, string) (net.Listener, error) {
		if len(ports) == 0 {
			return nil, errors.New("no more ports")
		}
		p := ports[0]
		ports = ports[1:]
		return portListener{p}, nil
	}
}

// A port handed out once is never handed out again, even when the kernel
// offers it again after it was closed, so that two clusters starting at
// once never share one.
func TestFreePortsNeverRepeat(t *testing.T) {
	kernel(t, 10, 11, 10, 12, 11, 13, 13, 12, 14)
	first, err := freePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	second, err := freePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	third, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	got := append(append(first, second...), third)
	if want := []int{10, 11, 12, 13, 14}; !slices.Equal(got, want) {
		t.Errorf("ports handed out %v, want %v", got, want)
	}
}

// Within one call, the ports differ even where the kernel repeats one.
func TestFreePortsDistinct(t *testing.T) {
	kernel(t, 20, 20, 21)
	got, err := freePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{20, 21}; !slices.Equal(got, want) {
		t.Errorf("freePorts(2) = %v, want %v", got, want)
	}
}

// The real kernel's ports: distinct across calls, and each one free.
func TestFreePortsBind(t *testing.T) {
	seen := map[int]bool{}
	for range 20 {
		ports, err := freePorts(3)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ports {
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
			l, err := net.Listen("tcp", hostPort(p))
			if err != nil {
				t.Fatalf("port %d handed out but not free: %v", p, err)
			}
			_ = l.Close()
		}
	}
}
