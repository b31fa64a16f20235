// Command qs is the one Quicksilver binary: the server and its tools.
//
// Each subcommand lives in a file of its own and registers itself in init.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
)

type command struct {
	summary string
	run     func(args []string) error
}

var commands = map[string]command{}

func register(name, summary string, run func(args []string) error) {
	commands[name] = command{summary: summary, run: run}
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage: qs <command> [flags]\n\ncommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(os.Stderr, "\nRun 'qs <command> -h' for the flags of a command.\n")
}

func main() {
	os.Exit(run(os.Args[1:]))
}

// run runs the command named by args[0] and returns the exit status: 0 on
// success and for help asked for (-h, --help, help), 2 for a usage error
// (an unknown command or flag, which the flag package has printed with
// the command's flags; or a usageError, printed here), 1 or the
// command's own status for other errors, printed once.
func run(args []string) int {
	if len(args) < 1 {
		usage()
		return 2
	}
	switch args[0] {
	case "-h", "--help", "help":
		usage()
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "qs: unknown command %q\n\n", args[0])
		usage()
		return 2
	}
	err := cmd.run(args[1:])
	var fe flagError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &fe):
		return 2
	}
	fmt.Fprintf(os.Stderr, "qs %s: %v\n", args[0], err)
	var ec exitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return 1
}

// flagError is a flag the flag package refused and has already printed,
// with the command's flags.
type flagError struct{ err error }

func (e flagError) Error() string { return e.err.Error() }
func (e flagError) Unwrap() error { return e.err }

// parseFlags parses a command's flags. A refused flag comes back as a
// flagError (printed already), -h as flag.ErrHelp.
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		return flagError{err}
	}
	return err
}

// usageError is a command line a command refused (missing or extra
// arguments, a wrong combination of flags): printed like any error, it
// exits 2 as the flag package's refusals do.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }
func (e usageError) ExitCode() int { return 2 }

// usageErrorf formats a usageError.
func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}

// exitCoder lets a command choose its exit status (qs verify exits 3 on
// corruption, for example).
type exitCoder interface{ ExitCode() int }
