//go:build kernel

package links

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/vishvananda/netlink"
)

// TestKernelReadAll reads a namespace in one go: the same states as
// ReadLink per interface, with indexes and root qdiscs.
func TestKernelReadAll(t *testing.T) {
	v, a, _ := pairOfPods(t, 1400)
	if _, err := EnsureVeth(v); err != nil {
		t.Fatal(err)
	}
	mustPing(t, a, "10.0.0.2")
	l, err := a.h.LinkByName("eth1")
	if err != nil {
		t.Fatal(err)
	}
	tbf := &netlink.Tbf{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index, Handle: netlink.MakeHandle(5, 0), Parent: netlink.HANDLE_ROOT},
		Rate: 125000, Limit: 32768, Buffer: 4096}
	if err := a.h.QdiscAdd(tbf); err != nil {
		t.Fatal(err)
	}
	all, err := ReadAll(a)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 {
		t.Fatalf("ReadAll: %v, want lo and eth1", all)
	}
	for name, got := range all {
		want := mustState(t, a, name)
		// Counters read first can only be behind (IPv6 MLD reports run on).
		if got.Counters.TxPackets > want.Counters.TxPackets || (name == "eth1" && got.Counters.TxPackets == 0) {
			t.Errorf("%s: tx packets %d, then %d from ReadLink", name, got.Counters.TxPackets, want.Counters.TxPackets)
		}
		got.Counters, want.Counters = Counters{}, Counters{}
		if !reflect.DeepEqual(got.Reading, want) {
			t.Errorf("%s: ReadAll %+v, ReadLink %+v", name, got.Reading, want)
		}
		if got.Index != index(t, a, name) {
			t.Errorf("%s: index %d, want %d", name, got.Index, index(t, a, name))
		}
	}
	if e := all["eth1"]; e.RootQdisc != "tbf" || e.RootHandle != netlink.MakeHandle(5, 0) {
		t.Errorf("eth1 root qdisc %s %x, want tbf 5:", e.RootQdisc, e.RootHandle)
	}
	if e := all["lo"]; e.RootHandle != 0 {
		t.Errorf("lo root qdisc %s %x, want the kernel's default (handle 0)", e.RootQdisc, e.RootHandle)
	}
	// Read of one interface says what ReadAll says of it.
	for name, want := range all {
		got, ok, err := Read(a, name)
		if err != nil || !ok {
			t.Fatalf("Read %s: %v (found %v)", name, err, ok)
		}
		got.Counters, want.Counters = Counters{}, Counters{}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: Read %+v, ReadAll %+v", name, got, want)
		}
	}
	if _, ok, err := Read(a, "eth9"); ok || err != nil {
		t.Errorf("Read of a missing interface: found %v, error %v; want not found and no error", ok, err)
	}

	if err := SetMTU(a, "eth1", 1300); err != nil {
		t.Fatal(err)
	}
	if m := mustState(t, a, "eth1").MTU; m != 1300 {
		t.Fatalf("mtu %d after SetMTU 1300", m)
	}
	if err := SetMTU(a, "eth9", 1300); err == nil {
		t.Fatal("SetMTU of a missing interface succeeded")
	}
}

// TestKernelReadAllWideNetns reads a namespace of 1,024 veth ends, whose
// link dump spans many of the kernel's messages (64 KiB each), decoded as
// they arrive: every interface, with its index and address.
func TestKernelReadAllWideNetns(t *testing.T) {
	const n = 1024
	ns := vethNetns(t, n)
	all, err := ReadAll(ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != n+1 {
		t.Fatalf("ReadAll: %d interfaces, want lo and %d", len(all), n)
	}
	for i := range n {
		name := fmt.Sprintf("d%d", i)
		got := all[name]
		if got.Index != index(t, ns, name) || got.Kind != "veth" || len(got.Addrs) != 1 || got.Addrs[0] != pfx(fmt.Sprintf("10.%d.%d.1/24", i/256, i%256)) {
			t.Fatalf("%s: ReadAll %+v, want veth index %d with 10.%d.%d.1/24", name, got, index(t, ns, name), i/256, i%256)
		}
	}
}

// BenchmarkKernelReadAllWideNetns reads every interface of a namespace of
// 4,096 veths with an address each, as the link watcher and ApplyPod read a
// wide pod: with -benchmem, the garbage each read leaves, which sets how
// high the collector lets meshnetd's heap climb while a wide pod is wired.
func BenchmarkKernelReadAllWideNetns(b *testing.B) {
	const n = 4096
	ns := vethNetns(b, n)
	b.ReportAllocs()
	for b.Loop() {
		if all, err := ReadAll(ns); err != nil || len(all) != n+1 {
			b.Fatalf("ReadAll: %d interfaces, %v", len(all), err)
		}
	}
}
