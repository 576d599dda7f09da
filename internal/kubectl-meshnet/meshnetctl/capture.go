package meshnetctl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/gopacket/gopacket/pcapgo"
	"github.com/spf13/cobra"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/pcapfilter"
	"github.com/meshnet/meshnet/internal/relayapi"
)

func newCaptureCommand(o *options) *cobra.Command {
	var f captureFlags
	cmd := &cobra.Command{
		Use:   "capture POD INTERFACE [-w FILE|-] [-f FILTER] [--both] [-c COUNT] [--duration D] [--snap-length BYTES]",
		Short: "Capture the packets of a pod's link, as pcapng for Wireshark or tshark",
		Long: `Capture the packets crossing INTERFACE of POD, live, from the pod's node,
as a pcapng stream that Wireshark and tshark read. The link is not changed
(no qdisc, no down time).

The capture goes through the API server to meshnet's aggregated API
(v1alpha1.meshnet.networkop.co.uk), which relays it from the meshnetd of the
pod's node. You need the right to change the link: patch on Topologies in
the pod's namespace, and get on pods/proxy in meshnet.networkop.co.uk
there (the namespace's edit role has both).

--filter keeps only the packets a capture filter in tcpdump's syntax
selects ("icmp or arp", "tcp port 179", "host 10.0.0.2 and not port 22"),
applied by the node's kernel, so the rest never leaves it. meshnet compiles
most of the syntax itself (hosts, nets, ports, protocols, and/or/not,
proto[offset:size] comparisons); what it does not take (vlan, mpls, host
names...) is refused, named. See docs/kubectl-meshnet.md.

It ends after --count packets or --duration, when you press Ctrl-C, or when
the pod goes away; the API server keeps it open for as long as it runs.`,
		Example: `  # Watch r1's eth1 live in Wireshark
  kubectl meshnet capture r1 eth1 -n lab -w - | wireshark -k -i -

  # Ten packets, decoded by tshark
  kubectl meshnet capture r1 eth1 -n lab -c 10 -w - | tshark -r -

  # Thirty seconds of headers only, into a file
  kubectl meshnet capture r1 eth1 -n lab --duration 30s --snap-length 128 -w r1-eth1.pcapng

  # BGP's packets only
  kubectl meshnet capture r1 eth1 -n lab -f "tcp port bgp" -w - | tshark -r - -V

  # Both ends of the link, each on its node, in one file
  kubectl meshnet capture r1 eth1 -n lab --both -w r1-r2.pcapng`,
		Args:              exactArgs("POD", "INTERFACE"),
		ValidArgsFunction: o.completeLinks,
		RunE: func(cmd *cobra.Command, args []string) error {
			// Checked here too, so that a typo is named before anything
			// is opened; the node compiles it again.
			if _, err := pcapfilter.Compile(f.filter, f.snapLength); err != nil {
				return fmt.Errorf("--filter %q: %w", f.filter, err)
			}
			out, closeOut, err := f.output(cmd.OutOrStdout())
			if err != nil {
				return err
			}
			if err := o.connectPod(cmd.Context(), args); err != nil {
				return errors.Join(err, closeOut())
			}
			n, err := o.capture(cmd.Context(), out, args[0], args[1], f)
			if cerr := closeOut(); err == nil {
				err = cerr
			}
			if err != nil && n == 0 && f.file != "-" {
				_ = os.Remove(f.file) // refused: no empty file left behind
			}
			if err == nil && f.file != "-" {
				fmt.Fprintf(o.stderr, "%d bytes written to %s\n", n, f.file)
			}
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&f.file, "write", "w", "", `file to write the pcapng stream to; "-" for standard output (to pipe into tshark or Wireshark)`)
	fs.Uint32VarP(&f.count, "count", "c", 0, "stop after this many packets (0: no limit)")
	fs.DurationVar(&f.duration, "duration", 0, "stop after this long, 24h at most (0: no limit)")
	fs.Uint32Var(&f.snapLength, "snap-length", 0, "bytes kept of each packet, 34 to 262144 (0: whole packets)")
	fs.StringVarP(&f.filter, "filter", "f", "", `capture filter in tcpdump's syntax ("tcp port 179"; empty: every packet)`)
	fs.BoolVar(&f.both, "both", false, "capture the link's other end too, on its own node, into the same stream: an interface per end (--count counts per end)")
	return cmd
}

// captureFlags are capture's flags.
type captureFlags struct {
	file       string
	count      uint32
	duration   time.Duration
	snapLength uint32
	filter     string
	both       bool
}

// output opens where the stream goes. Standard output must be said (-w -),
// and is refused when it is a terminal: pcapng is binary.
func (f captureFlags) output(stdout io.Writer) (io.Writer, func() error, error) {
	switch f.file {
	case "":
		return nil, nil, errors.New(`-w: say where the pcapng stream goes: a file, or "-" for standard output (for example -w - | tshark -r -)`)
	case "-":
		if file, ok := stdout.(*os.File); ok {
			if st, err := file.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				return nil, nil, errors.New("-w -: standard output is a terminal, and pcapng is binary: pipe it into tshark or Wireshark, or give a file")
			}
		}
		return stdout, func() error { return nil }, nil
	}
	file, err := os.Create(f.file)
	if err != nil {
		return nil, nil, fmt.Errorf("-w: %w", err)
	}
	return file, file.Close, nil
}

// capture streams a capture of pod's intf from the aggregated API into w,
// and returns how many bytes it wrote. With --both the link's other end
// is captured too, into the same stream.
func (o *options) capture(ctx context.Context, w io.Writer, pod, intf string, f captureFlags) (int64, error) {
	if f.both {
		return o.captureBoth(ctx, w, pod, intf, f)
	}
	body, err := o.openCapture(ctx, pod, intf, f)
	if err != nil {
		return 0, err
	}
	defer body.Close()
	br := bufio.NewReaderSize(body, 64<<10) // a header with the longest filter fits
	if err := checkFilter(br, f.filter); err != nil {
		return 0, fmt.Errorf("capture of %s %s: %w", pod, intf, err)
	}
	n, err := io.Copy(w, br)
	if err != nil && ctx.Err() != nil {
		return n, nil // Ctrl-C: the capture so far is the result
	}
	if err != nil {
		return n, fmt.Errorf("capture of %s %s cut off after %d bytes: %w", pod, intf, n, err)
	}
	return n, nil
}

// captureBoth captures both ends of pod's link intf, each on its own
// node, into one pcapng stream on w with an interface for each end.
func (o *options) captureBoth(ctx context.Context, w io.Writer, pod, intf string, f captureFlags) (int64, error) {
	t, err := o.topology(ctx, pod)
	if err != nil {
		return 0, err
	}
	i, err := linkIndex(t, intf)
	if err != nil {
		return 0, err
	}
	l := t.Spec.Links[i]
	switch {
	case l.PeerPod == v1beta1.PeerHost:
		return 0, fmt.Errorf("--both: %s's %s is a macvlan on its node's NIC %s, which has no other end to capture", pod, intf, l.PeerIntf)
	case l.LinkOptions != nil:
		return 0, fmt.Errorf("--both: %s's %s reaches a device outside the cluster, whose end meshnet cannot capture", pod, intf)
	}
	ends := []captureEnd{{name: pod + "/" + intf}, {name: l.PeerPod + "/" + l.PeerIntf}}
	for k, e := range []struct{ pod, intf string }{{pod, intf}, {l.PeerPod, l.PeerIntf}} {
		body, err := o.openCapture(ctx, e.pod, e.intf, f)
		if err != nil {
			for _, open := range ends[:k] {
				open.r.Close()
			}
			return 0, fmt.Errorf("capture of %s %s: %w", e.pod, e.intf, err)
		}
		ends[k].r = body
	}
	defer func() {
		for _, e := range ends {
			e.r.Close()
		}
	}()
	cw := &countingWriter{w: w}
	err = mergeCaptures(cw, ends, f.filter)
	if err != nil && ctx.Err() != nil {
		return cw.n, nil // Ctrl-C: the capture so far is the result
	}
	if err != nil {
		return cw.n, fmt.Errorf("capture of both ends of %s %s cut off after %d bytes: %w", pod, intf, cw.n, err)
	}
	return cw.n, nil
}

// openCapture opens the stream of a capture of pod's intf.
func (o *options) openCapture(ctx context.Context, pod, intf string, f captureFlags) (io.ReadCloser, error) {
	api, err := o.aggregated(0) // a stream: no --request-timeout
	if err != nil {
		return nil, err
	}
	req := api.Get().AbsPath(relayapi.CapturePath(o.namespace, pod, intf))
	if f.count != 0 {
		req = req.Param("max_packets", strconv.FormatUint(uint64(f.count), 10))
	}
	if f.duration != 0 {
		req = req.Param("duration", f.duration.String())
	}
	if f.snapLength != 0 {
		req = req.Param("snap_length", strconv.FormatUint(uint64(f.snapLength), 10))
	}
	if f.filter != "" {
		req = req.Param("filter", f.filter)
	}
	// The stream has no end of its own: no client timeout applies.
	return req.Timeout(0).Stream(ctx)
}

// checkFilter reads the head of a capture stream (its section header and
// first interface, which meshnetd sends at once) without consuming it, and
// refuses a stream whose interface does not record the filter asked for:
// a meshnetd older than capture filters captures every packet.
func checkFilter(br *bufio.Reader, filter string) error {
	if filter == "" {
		return nil
	}
	// Each block's total length follows its type (little-endian, as
	// meshnetd writes them).
	size := 0
	for range 2 {
		head, err := br.Peek(size + 8)
		if err != nil {
			return fmt.Errorf("read the stream's header: %w", err)
		}
		size += int(binary.LittleEndian.Uint32(head[size+4:]))
		if size > br.Size() {
			return fmt.Errorf("the stream's header is %d bytes or more", size)
		}
	}
	head, err := br.Peek(size)
	if err != nil {
		return fmt.Errorf("read the stream's header: %w", err)
	}
	return filterRecorded(bytes.NewReader(head), filter)
}

// filterRecorded refuses a pcapng stream r whose first interface does not
// record filter.
func filterRecorded(r io.Reader, filter string) error {
	ng, err := pcapgo.NewNgReader(r, pcapgo.DefaultNgReaderOptions)
	if err != nil {
		return fmt.Errorf("read the stream's header: %w", err)
	}
	intf, err := ng.Interface(0)
	if err != nil {
		return fmt.Errorf("read the stream's header: %w", err)
	}
	return sameFilter(intf, filter)
}

// sameFilter refuses an interface of a capture stream that does not record
// filter, the one asked for.
func sameFilter(intf pcapgo.NgInterface, filter string) error {
	if intf.Filter != filter {
		return errors.New("--filter: the node's meshnetd captured without it (it predates capture filters: update meshnet's DaemonSet)")
	}
	return nil
}

// captureEnd is one link end's capture stream, and the name its
// interface gets in the merged stream.
type captureEnd struct {
	name string
	r    io.ReadCloser
}

// mergeCaptures writes the packets of every end's pcapng stream, as they
// come, into one pcapng stream on w, with an interface per end named for
// it, and each end's drop count at its end; each stream must record
// filter, as meshnetd does the filter it applied. Packets are flushed to w at
// most captureFlush after they came, as meshnetd flushes them.
func mergeCaptures(w io.Writer, ends []captureEnd, filter string) error {
	var (
		ngw *pcapgo.NgWriter
		ids = make([]int, len(ends))
		rs  = make([]*pcapgo.NgReader, len(ends))
	)
	for i, e := range ends {
		r, err := pcapgo.NewNgReader(e.r, pcapgo.DefaultNgReaderOptions)
		if err != nil {
			return fmt.Errorf("%s: read its stream: %w", e.name, err)
		}
		intf, err := r.Interface(0)
		if err != nil {
			return fmt.Errorf("%s: read its stream: %w", e.name, err)
		}
		if err := sameFilter(intf, filter); err != nil {
			return fmt.Errorf("%s: %w", e.name, err)
		}
		intf.Name, intf.Statistics = e.name, pcapgo.NgInterfaceStatistics{}
		if i == 0 {
			ngw, err = pcapgo.NewNgWriterInterface(w, intf, pcapgo.NgWriterOptions{SectionInfo: pcapgo.NgSectionInfo{Application: "kubectl-meshnet"}})
		} else {
			ids[i], err = ngw.AddInterface(intf)
		}
		if err != nil {
			return err
		}
		rs[i] = r
	}
	var mu sync.Mutex
	if err := ngw.Flush(); err != nil { // the header at once: a reader knows the stream began
		return err
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		tick := time.NewTicker(captureFlush)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				mu.Lock()
				_ = ngw.Flush() // a failed write fails the next WritePacket too
				mu.Unlock()
			case <-done:
				return
			}
		}
	}()
	errs := make(chan error, len(ends))
	for i, r := range rs {
		go func() {
			for {
				data, ci, err := r.ReadPacketData()
				if errors.Is(err, io.EOF) {
					errs <- nil
					return
				}
				if err != nil {
					errs <- fmt.Errorf("%s: %w", ends[i].name, err)
					return
				}
				ci.InterfaceIndex = ids[i]
				mu.Lock()
				err = ngw.WritePacket(ci, data)
				mu.Unlock()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var failed error
	for range rs {
		if err := <-errs; err != nil && failed == nil {
			failed = err
			for _, e := range ends { // the other end ends too
				e.r.Close()
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, r := range rs {
		// The end's own count of what its kernel dropped, from its last block.
		if intf, err := r.Interface(0); err == nil && intf.Statistics.LastUpdate != (time.Time{}) {
			if err := ngw.WriteInterfaceStats(ids[i], intf.Statistics); err != nil && failed == nil {
				failed = err
			}
		}
	}
	if err := ngw.Flush(); err != nil && failed == nil {
		failed = err
	}
	return failed
}

// captureFlush is how long a packet of a merged capture may wait in the
// buffer.
const captureFlush = 100 * time.Millisecond

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
