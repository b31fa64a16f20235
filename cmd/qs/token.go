package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/quicksilver-kv/qs/internal/gateway"
)

func init() {
	register("token", "make a producer token: qs token --name N --prefix P [--out FILE] (prints its producers-file entry)", cmdToken)
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func cmdToken(args []string) error {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	name := fs.String("name", "", "producer name ([a-zA-Z0-9_.-]{1,64})")
	var prefixes, dbs listFlag
	fs.Var(&prefixes, "prefix", "key prefix the producer may write (repeat for several)")
	fs.Var(&dbs, "db", "database the producer may write (repeat; default: every database)")
	out := fs.String("out", "", "write the token to this new file (mode 0600) instead of stderr")
	hash := fs.Bool("hash", false, "read a token on stdin and print its hash instead")
	if _, err := parseArgs(fs, args, 0, "qs token --name N --prefix P [--prefix P2] [--db D] [--out FILE]  |  qs token --hash < token"); err != nil {
		return err
	}
	if *hash {
		line, err := bufio.NewReader(io.LimitReader(os.Stdin, 4096)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if line = strings.TrimSpace(line); line == "" {
			return errors.New("no token on stdin")
		}
		fmt.Println(gateway.HashToken(line))
		return nil
	}
	if *name == "" || len(prefixes) == 0 {
		return errors.New(`--name and at least one --prefix are needed (--prefix "" allows every key)`)
	}
	token, h := gateway.NewToken()
	var b strings.Builder
	fmt.Fprintf(&b, "[[producer]]\nname = %s\ntokens = [%s]\n", strconv.Quote(*name), strconv.Quote(h))
	if len(dbs) > 0 {
		fmt.Fprintf(&b, "databases = %s\n", tomlList(dbs))
	}
	fmt.Fprintf(&b, "prefixes = %s\n# ops_per_second = 100\n# bytes_per_second = 1048576\n", tomlList(prefixes))
	// Check the entry the way the server will.
	f, err := gateway.ParseFile([]byte(b.String()), "generated entry")
	if err == nil {
		err = f.Validate(nil)
	}
	if err != nil {
		return err
	}
	if *out != "" {
		fd, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintln(fd, token); err != nil {
			fd.Close()
			return err
		}
		if err := fd.Close(); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(os.Stderr, "token (give it to the producer; it is not stored anywhere): %s\n", token)
	}
	fmt.Print(b.String())
	return nil
}

func tomlList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
