package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

func init() {
	register("members", "list the gossip overlay with estimated round trips and each member's place in the tree: qs members [--addr A] [--json]", cmdMembers)
}

func cmdMembers(args []string) error {
	fs := flag.NewFlagSet("members", flag.ContinueOnError)
	cf := newClientFlags(fs)
	asJSON := fs.Bool("json", false, "print the answer as JSON")
	if _, err := parseArgs(fs, args, 0, "qs members [flags]"); err != nil {
		return err
	}
	c, ctx, cancel, err := cf.client()
	if err != nil {
		return err
	}
	defer cancel()
	o, err := c.Overlay(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(o)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tDC\tRTT\tREPL\tDB\tROLE\tDEPTH\tPARENT\tCHILDREN\tAPPLIED")
	for _, m := range o.Members {
		name := m.Name
		if m.Self {
			name += " *"
		}
		if m.Suspect {
			name += " (suspect)"
		}
		rtt := "-"
		if m.RTTSeconds != nil {
			rtt = time.Duration(*m.RTTSeconds * float64(time.Second)).Round(10 * time.Microsecond).String()
		}
		if len(m.Databases) == 0 {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t-\t-\t-\t-\t-\t-\n", name, m.DC, rtt, m.Repl)
		}
		for _, d := range m.Databases {
			parent := "-"
			if d.Parent != nil {
				parent = *d.Parent
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d/%d\t%d\n", name, m.DC, rtt, m.Repl, d.Name, d.Role, d.Depth, parent, d.Children, d.MaxChildren, d.AppliedIndex)
		}
	}
	if len(o.DCs) > 0 {
		fmt.Fprintf(w, "\nDC\tDB\tRELAYS (%d per DC)\tPROXIES\n", o.RelaysPerDC)
		for _, d := range o.DCs {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", orDash(d.DC), d.Database, orDash(strings.Join(d.Relays, ",")), strings.Join(d.Proxies, ","))
		}
	}
	return w.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
