package meshnetctl

import (
	"bufio"
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// stream is a pcapng stream as meshnetd sends one: an Ethernet interface
// that records filter, n packets of one byte (tag), and the interface's
// statistics at the end.
func stream(t *testing.T, n int, tag byte, dropped uint64, filter string) io.ReadCloser {
	t.Helper()
	var buf bytes.Buffer
	w, err := pcapgo.NewNgWriterInterface(&buf, pcapgo.NgInterface{Name: "eth1", LinkType: layers.LinkTypeEthernet, TimestampResolution: 9, Filter: filter},
		pcapgo.NgWriterOptions{SectionInfo: pcapgo.NgSectionInfo{Application: "meshnetd"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(int64(i), 0), CaptureLength: 1, Length: 1}
		if err := w.WritePacket(ci, []byte{tag}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteInterfaceStats(0, pcapgo.NgInterfaceStatistics{LastUpdate: time.Unix(99, 0), PacketsReceived: uint64(n) + dropped, PacketsDropped: dropped}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return io.NopCloser(&buf)
}

// TestMergeCaptures: both ends' streams in one, an interface named for
// each end, every packet on its end's interface, each end's drops kept.
func TestMergeCaptures(t *testing.T) {
	var out bytes.Buffer
	if err := mergeCaptures(&out, []captureEnd{{"r1/eth1", stream(t, 3, 'a', 0, "icmp")}, {"r2/eth2", stream(t, 2, 'b', 7, "icmp")}}, "icmp"); err != nil {
		t.Fatal(err)
	}
	r, err := pcapgo.NewNgReader(&out, pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	count := map[int]int{}
	for {
		data, ci, err := r.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if want := []byte{'a' + byte(ci.InterfaceIndex)}; !bytes.Equal(data, want) {
			t.Errorf("packet %q on interface %d, want %q", data, ci.InterfaceIndex, want)
		}
		count[ci.InterfaceIndex]++
	}
	if count[0] != 3 || count[1] != 2 {
		t.Errorf("packets per interface %v, want 3 and 2", count)
	}
	for i, want := range []struct {
		name    string
		dropped uint64
	}{{"r1/eth1", 0}, {"r2/eth2", 7}} {
		intf, err := r.Interface(i)
		if err != nil || intf.Name != want.name || intf.Statistics.PacketsDropped != want.dropped {
			t.Errorf("interface %d: %q dropped %d (%v), want %q dropped %d", i, intf.Name, intf.Statistics.PacketsDropped, err, want.name, want.dropped)
		}
	}
}

// TestCheckFilter: a stream whose interface does not record the filter
// asked for (a meshnetd older than filters) is refused before a byte is
// written; the head it reads is left for the copy.
func TestCheckFilter(t *testing.T) {
	for _, tc := range []struct {
		asked, recorded string
		ok              bool
	}{{"", "", true}, {"icmp", "icmp", true}, {"icmp", "", false}, {"", "icmp", true}} {
		s := stream(t, 2, 'a', 0, tc.recorded)
		br := bufio.NewReader(s)
		err := checkFilter(br, tc.asked)
		if (err == nil) != tc.ok {
			t.Errorf("asked %q, recorded %q: %v, want ok %v", tc.asked, tc.recorded, err, tc.ok)
			continue
		}
		if err != nil {
			continue
		}
		r, err := pcapgo.NewNgReader(br, pcapgo.DefaultNgReaderOptions)
		if err != nil {
			t.Fatalf("asked %q: the stream after the check: %v", tc.asked, err)
		}
		n := 0
		for {
			if _, _, err := r.ReadPacketData(); err != nil {
				break
			}
			n++
		}
		if n != 2 {
			t.Errorf("asked %q: %d packets after the check, want 2", tc.asked, n)
		}
	}
}
