// Package capture records a link's traffic as a pcapng stream, the format
// Wireshark and tshark read live. It reads from an AF_PACKET socket opened
// in the pod's network namespace and bound to the link's interface, so the
// link itself is not touched: no qdisc, no mirror, no moment down.
//
// A capture filter (Options.Filter, internal/pcapfilter's program) runs
// in the kernel, so that what it leaves out is never copied.
package capture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Options bound a capture.
type Options struct {
	// Count stops the capture after this many packets; 0 for no limit.
	Count int
	// Duration stops the capture after this long; 0 for no limit.
	Duration time.Duration
	// SnapLength keeps this many bytes of each packet, as tcpdump's -s;
	// 0 keeps them whole. The kernel cuts them, so that its buffer holds
	// more packets and fewer are dropped at high rates.
	SnapLength int
	// Filter is the program that selects the packets to keep (and how
	// much of each, as its return value), which the kernel runs on each
	// packet before the socket sees it (pcapfilter.Compile's); nil keeps
	// every packet. FilterText is its source, which the stream records.
	Filter     []bpf.Instruction
	FilterText string
}

// ErrFilter wraps the kernel's refusal of a capture's filter (ENOMEM for
// a program longer than the socket's option memory takes).
var ErrFilter = errors.New("the kernel refused the capture filter")

// Stats is what a capture saw.
type Stats struct {
	// Packets were written to the stream.
	Packets int
	// Dropped is what the kernel dropped because the reader fell behind
	// (the socket's buffer was full): packets the stream lacks.
	Dropped uint64
}

// Run captures dev's traffic in the network namespace at netnsPath into w
// as pcapng until ctx ends or opts' limits are reached, and returns what it
// saw. A reader that stops reading (w's Write fails) ends it.
func Run(ctx context.Context, netnsPath, dev string, opts Options, w io.Writer) (Stats, error) {
	var st Stats
	h, skip, err := openSocket(netnsPath, dev, opts)
	if err != nil {
		return st, err
	}
	defer h.Close()
	ngw, err := newStream(w, dev, opts)
	if err != nil {
		return st, err
	}

	if opts.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Duration)
		defer cancel()
	}
	// Closing the socket ends a read that waits; its counters are read
	// first.
	var final *unix.TpacketStats
	stopped := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(stopped)
		final, _ = h.Stats()
		h.Close()
	})
	defer stop()
	// Packets are flushed to w at most FlushInterval after they came: a
	// flush (a write, a message to a client) per packet would cap the
	// capture at a few thousand packets a second.
	f := &flusher{w: ngw}
	tick := time.NewTicker(FlushInterval)
	defer tick.Stop()
	quit := make(chan struct{})
	var ticker sync.WaitGroup
	defer ticker.Wait()
	defer close(quit)
	ticker.Add(1)
	go func() {
		defer ticker.Done()
		for {
			select {
			case <-tick.C:
				if err := f.flush(); err != nil {
					h.Close() // the reader is gone: end the capture
					return
				}
			case <-quit:
				return
			}
		}
	}()
	for opts.Count == 0 || st.Packets < opts.Count {
		data, ci, err := h.ZeroCopyReadPacketData()
		if err != nil {
			if ferr := f.failed(); ferr != nil {
				return st, ferr
			}
			if ctx.Err() != nil {
				break
			}
			if linkWentDown(err) {
				// A cable pull during the capture: the socket says so once
				// and then waits for the link to come back, as the user
				// does, to see what the link carries before and after.
				continue
			}
			return st, fmt.Errorf("capture on %s: %w", dev, err)
		}
		if skip > 0 {
			skip-- // queued before the filter was on
			continue
		}
		ci.InterfaceIndex = 0
		if err := f.write(ci, data); err != nil {
			return st, err
		}
		st.Packets++
	}
	if stop() {
		final, _ = h.Stats()
	} else {
		<-stopped
	}
	if final != nil {
		st.Dropped = uint64(final.Drops)
		f.writeStats(pcapgo.NgInterfaceStatistics{
			LastUpdate: time.Now(), PacketsReceived: uint64(final.Packets), PacketsDropped: uint64(final.Drops),
		})
	}
	return st, f.flush()
}

// openSocket opens a packet socket on dev in the network namespace at
// netnsPath, with opts' filter and snap length; skip is how many packets
// it queued before the filter was on, which the reader leaves out.
func openSocket(netnsPath, dev string, opts Options) (h *pcapgo.EthernetHandle, skip int, err error) {
	// The socket belongs to the namespace it is made in; it is made there
	// and used from here.
	err = ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		var err error
		h, err = pcapgo.NewEthernetHandle(dev)
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("capture on %s: %w", dev, err)
	}
	defer func() {
		if err != nil {
			h.Close()
		}
	}()
	// The socket took every packet from its making on. With a filter,
	// those are left out as libpcap leaves them out, without a clock: a
	// program that takes nothing stops the queue from growing, reading
	// the socket's counters (which resets them) says how many it holds,
	// and as many reads skip them once the filter is on.
	if opts.Filter != nil {
		if err := setFilter(h, []bpf.Instruction{bpf.RetConstant{Val: 0}}); err != nil {
			return nil, 0, fmt.Errorf("capture on %s: %w", dev, err)
		}
		queued, err := h.Stats()
		if err != nil {
			return nil, 0, fmt.Errorf("capture on %s: read its counters: %w", dev, err)
		}
		skip = int(queued.Packets)
	}
	filter := opts.Filter
	if filter == nil && opts.SnapLength > 0 {
		// A program that takes every packet, its first SnapLength bytes:
		// libpcap's own for a snap length without a filter.
		filter = []bpf.Instruction{bpf.RetConstant{Val: uint32(opts.SnapLength)}}
	}
	if filter != nil {
		if err := setFilter(h, filter); err != nil {
			return nil, 0, fmt.Errorf("capture on %s: %w", dev, err)
		}
	}
	if opts.SnapLength > 0 {
		if err := h.SetCaptureLength(opts.SnapLength); err != nil {
			return nil, 0, fmt.Errorf("capture on %s: snap length: %w", dev, err)
		}
	}
	return h, skip, nil
}

// newStream writes the pcapng stream's header to w, at once: a reader
// knows the stream began.
func newStream(w io.Writer, dev string, opts Options) (*pcapgo.NgWriter, error) {
	ngw, err := pcapgo.NewNgWriterInterface(w, pcapgo.NgInterface{
		Name: dev, LinkType: layers.LinkTypeEthernet, SnapLength: uint32(max(opts.SnapLength, 0)),
		OS: "Linux", TimestampResolution: 9, // nanoseconds
		Filter: opts.FilterText,
	}, pcapgo.NgWriterOptions{SectionInfo: pcapgo.NgSectionInfo{Application: "meshnetd"}})
	if err != nil {
		return nil, fmt.Errorf("capture on %s: write the stream's header: %w", dev, err)
	}
	if err := ngw.Flush(); err != nil {
		return nil, fmt.Errorf("capture on %s: write the stream's header: %w", dev, err)
	}
	return ngw, nil
}

// linkWentDown reports the read error of a packet socket whose interface
// went down (ENETDOWN). pcapgo formats the errno into its message (%s, not
// %w), so the message is what tells it.
func linkWentDown(err error) bool {
	return errors.Is(err, unix.ENETDOWN) || strings.HasSuffix(err.Error(), unix.ENETDOWN.Error())
}

// FlushInterval is how long a captured packet may wait to be sent on.
const FlushInterval = 20 * time.Millisecond

// flusher is the pcapng writer shared by the reading loop and the ticker
// that flushes it.
type flusher struct {
	mu    sync.Mutex
	w     *pcapgo.NgWriter
	dirty bool
	err   error
}

func (f *flusher) write(ci gopacket.CaptureInfo, data []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	f.dirty = true
	return f.w.WritePacket(ci, data)
}

// writeStats ends the stream with the socket's counters; the reader knows
// then what it lacks.
func (f *flusher) writeStats(stats pcapgo.NgInterfaceStatistics) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.dirty = true
		f.err = f.w.WriteInterfaceStats(0, stats)
	}
}

func (f *flusher) flush() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dirty && f.err == nil {
		f.err = f.w.Flush()
		f.dirty = false
	}
	return f.err
}

func (f *flusher) failed() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// setFilter attaches prog to h's socket.
func setFilter(h *pcapgo.EthernetHandle, prog []bpf.Instruction) error {
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrFilter, err)
	}
	if err := h.SetBPF(raw); err != nil {
		return fmt.Errorf("%w: %w", ErrFilter, err)
	}
	return nil
}
