package controlplane

import (
	"net"
	"slices"
	"testing"
)

// TestSlotsApart: the default and the private real node hold nothing of
// the machine in common (directory, pinned namespace, bridge, hardware
// address, pods' subnet, cgroup), so that one runs beside the other; and
// only the private node's processes start in its mount namespace.
func TestSlotsApart(t *testing.T) {
	d, p := slotOf(false), slotOf(true)
	if d.private || !p.private {
		t.Fatalf("slotOf(false).private = %v, slotOf(true).private = %v", d.private, p.private)
	}
	if d.root != KubeletRoot || p.root != PrivateKubeletRoot {
		t.Errorf("roots %s and %s, want %s and %s", d.root, p.root, KubeletRoot, PrivateKubeletRoot)
	}
	for _, pair := range [][2]string{{d.root, p.root}, {d.bridge, p.bridge}, {d.mac, p.mac}, {d.subnet(), p.subnet()}, {d.cgroup, p.cgroup}} {
		if pair[0] == pair[1] {
			t.Errorf("both real nodes hold %q", pair[0])
		}
	}
	for _, s := range []slot{d, p} {
		_, subnet, err := net.ParseCIDR(s.subnet())
		if err != nil || !subnet.Contains(net.ParseIP(s.gateway)) {
			t.Errorf("%s: gateway %s outside its subnet %s (%v)", s.bridge, s.gateway, s.subnet(), err)
		}
		if subnet != nil && subnet.Contains(net.ParseIP(serviceIP)) {
			t.Errorf("%s: the Service's address %s is in the pods' subnet %s", s.bridge, serviceIP, s.subnet())
		}
	}
	if bin, args := d.command("/bin/kubelet", "--v=2"); bin != "/bin/kubelet" || !slices.Equal(args, []string{"--v=2"}) {
		t.Errorf("the default node runs %s %v, want /bin/kubelet [--v=2]", bin, args)
	}
	bin, args := p.command("/bin/kubelet", "--v=2")
	if want := []string{"--mount=" + p.ns(), "--", "/bin/kubelet", "--v=2"}; bin != "nsenter" || !slices.Equal(args, want) {
		t.Errorf("the private node runs %s %v, want nsenter %v", bin, args, want)
	}
}
