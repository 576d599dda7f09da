package meshnetctl

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/netemconv"
)

func newNetemCommand(o *options) *cobra.Command {
	var (
		wf      waitFlags
		clear   bool
		runtime bool
		hold    time.Duration
		set     = map[string]*string{}
	)
	cmd := &cobra.Command{
		Use:   "netem POD INTERFACE (--delay D [--jitter J] [--loss P] ... | --clear)",
		Short: "Shape a link's egress with netem (delay, loss, rate ...), or clear it",
		Long: `Shape the egress of POD's INTERFACE with tc-netem, or clear the shaping.

It sets spec.links[i].netem of POD's Topology to exactly the flags given
(flags not given are not kept from before); --clear removes it.
` + declarative + `

Units are tc's: durations 50ms, 1.5s, 250us; percentages 1% or 0.5;
rates 100mbit, 1gbit, 10mbps.
` + runtimeOnly + forHelp,
		Example: `  # 50 ms of delay with 5 ms of jitter, and 1% loss
  kubectl meshnet netem r1 eth1 -n lab --delay 50ms --jitter 5ms --loss 1%

  # Limit the link to 100 Mbit/s
  kubectl meshnet netem r1 eth1 -n lab --rate 100mbit

  # No more shaping
  kubectl meshnet netem r1 eth1 -n lab --clear

  # 200 ms of delay in the kernel only, until the controller's next pass
  kubectl meshnet netem r1 eth1 -n lab --delay 200ms --runtime

  # 100 ms of delay for 2 minutes, then the Topology's shaping again
  kubectl meshnet netem r1 eth1 -n lab --delay 100ms --for 2m`,
		Args:              exactArgs("POD", "INTERFACE"),
		ValidArgsFunction: o.completeLinks,
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := netemOf(cmd.Flags(), set, clear)
			if err != nil {
				return err
			}
			if runtime {
				if err := checkRuntime(cmd.Flags()); err != nil {
					return err
				}
			}
			if hold != 0 {
				if err := checkFor(cmd.Flags(), hold); err != nil {
					return err
				}
				if n == nil {
					return errors.New("--for: cannot be combined with --clear (deleting the LinkFault ends its shaping: kubectl delete linkfault NAME)")
				}
			}
			if err := o.connectPod(cmd.Context(), args); err != nil {
				return err
			}
			if hold != 0 {
				return o.createFault(cmd.Context(), cmd.OutOrStdout(), args[0], args[1], "netem",
					v1beta1.LinkFaultSpec{Netem: n, Duration: v1beta1.DurationOf(hold)}, wf)
			}
			f := linkField{
				name: "netem",
				set:  func(l *v1beta1.Link) { l.Netem = n },
				value: func(l *v1beta1.Link) any {
					if l.Netem == nil {
						return nil
					}
					return l.Netem
				},
				spell: func(l *v1beta1.Link) string { return words(l.Netem) },
			}
			if runtime {
				call := runtimeCall{method: http.MethodDelete, tail: "netem"}
				if n != nil {
					spec, _ := netemconv.FromTopology(n) // netemOf validated it
					call = runtimeCall{method: http.MethodPut, tail: "netem", body: netemconv.ToProto(spec),
						undo: fmt.Sprintf("kubectl meshnet netem %s %s --clear --runtime", args[0], args[1])}
				}
				return o.runtimeChange(cmd.Context(), cmd.OutOrStdout(), args[0], args[1], f, words(n), call)
			}
			return o.changeLink(cmd.Context(), cmd.OutOrStdout(), args[0], args[1], wf, f)
		},
	}
	for _, f := range netemFlags {
		set[f.name] = cmd.Flags().String(f.name, "", f.usage)
	}
	cmd.Flags().BoolVar(&clear, "clear", false, "remove the link's shaping")
	wf.bind(cmd.Flags())
	runtimeFlag(cmd.Flags(), &runtime)
	forFlag(cmd.Flags(), &hold)
	return cmd
}

// netemFlags are the netem command's flags: the Topology's netem fields,
// spelled with dashes.
var netemFlags = []struct{ name, usage string }{
	{"delay", "delay every packet by this long (50ms)"},
	{"jitter", "vary the delay by up to this much (5ms; needs --delay)"},
	{"delay-correlation", "correlation of the jitter (25%)"},
	{"distribution", "shape of the jitter: uniform, normal, pareto or paretonormal"},
	{"loss", "drop this share of packets (1%)"},
	{"loss-correlation", "correlation of the loss"},
	{"duplicate", "duplicate this share of packets"},
	{"duplicate-correlation", "correlation of the duplication"},
	{"corrupt", "flip a bit in this share of packets"},
	{"corrupt-correlation", "correlation of the corruption"},
	{"reorder", "send this share of packets at once, without the delay (needs --delay)"},
	{"reorder-correlation", "correlation of the reordering"},
	{"gap", "reorder only every gap-th packet"},
	{"rate", "limit the rate (100mbit, 1gbit, 10mbps)"},
	{"limit", "netem's queue length in packets (default: sized for delay x rate)"},
}

// netemOf builds the netem block the flags ask for (nil for --clear) and
// validates it as the controller will, naming each bad flag.
func netemOf(fs *pflag.FlagSet, set map[string]*string, clear bool) (*v1beta1.Netem, error) {
	var given []string
	for _, f := range netemFlags {
		if fs.Changed(f.name) {
			given = append(given, "--"+f.name)
		}
	}
	switch {
	case clear && len(given) > 0:
		return nil, fmt.Errorf("--clear: cannot be combined with %s", strings.Join(given, ", "))
	case clear:
		return nil, nil
	case len(given) == 0:
		return nil, errors.New("no shaping given: set at least one of --delay, --loss, --rate ... (see --help), or --clear")
	}
	// The block as JSON, from the Topology's own field names.
	block := map[string]any{}
	for _, f := range netemFlags {
		if !fs.Changed(f.name) {
			continue
		}
		field := strings.ReplaceAll(f.name, "-", "_")
		v := *set[f.name]
		if field == "gap" || field == "limit" {
			var n int32
			if _, err := fmt.Sscan(v, &n); err != nil || fmt.Sprint(n) != v {
				return nil, fmt.Errorf("--%s %q: not a whole number", f.name, v)
			}
			block[field] = n
			continue
		}
		block[field] = v
	}
	data, _ := json.Marshal(block)
	var n v1beta1.Netem
	if err := json.Unmarshal(data, &n); err != nil {
		return nil, fmt.Errorf("netem flags: %w", err)
	}
	if _, err := netemconv.FromTopology(&n); err != nil {
		var msgs []string
		for _, fe := range netemconv.Fields(err) {
			if fe.Field == "" {
				msgs = append(msgs, fe.Reason)
				continue
			}
			flag := strings.ReplaceAll(fe.Field, "_", "-")
			reason := fe.Reason
			if rest, ok := strings.CutPrefix(reason, "needs "); ok {
				reason = "needs " + fieldWord.ReplaceAllStringFunc(rest, func(w string) string {
					if _, ok := set[strings.ReplaceAll(w, "_", "-")]; ok {
						return "--" + strings.ReplaceAll(w, "_", "-")
					}
					return w
				})
			}
			msgs = append(msgs, fmt.Sprintf("--%s %q: %s", flag, *set[flag], reason))
		}
		return nil, errors.New(strings.Join(msgs, "; "))
	}
	return &n, nil
}

// fieldWord matches the Topology's netem field names in a reason that
// names what a field needs ("needs delay and jitter"), to spell them as
// flags.
var fieldWord = regexp.MustCompile(`\b[a-z]+(_[a-z]+)?\b`)
