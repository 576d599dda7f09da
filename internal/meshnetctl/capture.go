package meshnetctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshnet/meshnet/internal/pcapfilter"
	"github.com/meshnet/meshnet/internal/relay/relayapi"
)

func newCaptureCommand(o *options) *cobra.Command {
	var f captureFlags
	cmd := &cobra.Command{
		Use:   "capture POD INTERFACE [-w FILE|-] [-f FILTER] [-c COUNT] [--duration D] [--snap-length BYTES]",
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
  kubectl meshnet capture r1 eth1 -n lab -f "tcp port bgp" -w - | tshark -r - -V`,
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
			if err := o.connect(); err != nil {
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
	return cmd
}

// captureFlags are capture's flags.
type captureFlags struct {
	file       string
	count      uint32
	duration   time.Duration
	snapLength uint32
	filter     string
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
// and returns how many bytes it wrote.
func (o *options) capture(ctx context.Context, w io.Writer, pod, intf string, f captureFlags) (int64, error) {
	api, err := o.aggregated(0) // a stream: no --request-timeout
	if err != nil {
		return 0, err
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
	body, err := req.Timeout(0).Stream(ctx)
	if err != nil {
		return 0, err
	}
	defer body.Close()
	n, err := io.Copy(w, body)
	if err != nil && ctx.Err() != nil {
		return n, nil // Ctrl-C: the capture so far is the result
	}
	if err != nil {
		return n, fmt.Errorf("capture of %s %s cut off after %d bytes: %w", pod, intf, n, err)
	}
	return n, nil
}
