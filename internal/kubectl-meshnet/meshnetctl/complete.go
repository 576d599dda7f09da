package meshnetctl

import (
	"github.com/spf13/cobra"
)

// completePods completes a pod's name from the namespace's Topologies.
func (o *options) completePods(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 || o.connect() != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	topos, err := o.topologies(cmd.Context(), nil)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []cobra.Completion
	for _, t := range topos {
		names = append(names, t.Name)
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// completeLinks completes POD, then its interfaces.
func (o *options) completeLinks(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	switch len(args) {
	case 0:
		return o.completePods(cmd, args, prefix)
	case 1:
		if o.connect() != nil {
			break
		}
		t, err := o.topology(cmd.Context(), args[0])
		if err != nil {
			break
		}
		var names []cobra.Completion
		for _, l := range t.Spec.Links {
			names = append(names, cobra.CompletionWithDesc(l.LocalIntf, "to "+peerOf(t, &l)))
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
	return nil, cobra.ShellCompDirectiveNoFileComp
}
