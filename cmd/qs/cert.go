package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/quicksilver-kv/qs/internal/clusterauth"
	"github.com/quicksilver-kv/qs/internal/headsig"
)

func init() {
	register("cert", "make the cluster's credentials: qs cert ca (a CA), qs cert node (a node certificate), qs cert key (a cluster key), qs cert sign-key (the root's log signing key pair)", cmdCert)
}

const certUsage = `qs cert ca   --out DIR [--name NAME] [--days N]
qs cert node --ca DIR --name NODE --host HOST[,HOST...] [--raft-id ID[,ID...]] [--out DIR] [--days N]
qs cert key  --out FILE
qs cert sign-key --out DIR`

func cmdCert(args []string) error {
	if len(args) == 0 {
		return usageErrorf("usage:\n%s", certUsage)
	}
	switch args[0] {
	case "ca":
		return certCA(args[1:])
	case "node":
		return certNode(args[1:])
	case "key":
		return certKey(args[1:])
	case "sign-key":
		return certSignKey(args[1:])
	}
	return usageErrorf("unknown subcommand %q; usage:\n%s", args[0], certUsage)
}

// writeNew writes a new file with mode; it never overwrites one.
func writeNew(path string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func certCA(args []string) error {
	fs := flag.NewFlagSet("cert ca", flag.ContinueOnError)
	out := fs.String("out", "", "directory to write ca.pem and ca.key to (created)")
	name := fs.String("name", "qs cluster CA", "the CA's common name")
	days := fs.Int("days", 3650, "validity in days")
	if _, err := parseArgs(fs, args, 0, certUsage); err != nil {
		return err
	}
	if *out == "" || *days < 1 {
		return usageErrorf("usage:\n%s", certUsage)
	}
	cert, key, err := clusterauth.NewCA(*name, time.Duration(*days)*24*time.Hour)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o700); err != nil {
		return err
	}
	if err := writeNew(filepath.Join(*out, "ca.key"), key, 0o600); err != nil {
		return err
	}
	if err := writeNew(filepath.Join(*out, "ca.pem"), cert, 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %s and %s (keep ca.key offline; give every node ca.pem)\n", filepath.Join(*out, "ca.pem"), filepath.Join(*out, "ca.key"))
	return nil
}

func certNode(args []string) error {
	fs := flag.NewFlagSet("cert node", flag.ContinueOnError)
	caDir := fs.String("ca", "", "directory holding ca.pem and ca.key")
	name := fs.String("name", "", "the node's name (file names and common name)")
	hosts := fs.String("host", "", "DNS names and IP addresses peers reach the node at, comma-separated")
	ids := fs.String("raft-id", "", "Raft member ids this node may speak for, comma-separated")
	out := fs.String("out", ".", "directory to write NODE.pem and NODE.key to")
	days := fs.Int("days", 365, "validity in days")
	if _, err := parseArgs(fs, args, 0, certUsage); err != nil {
		return err
	}
	if *caDir == "" || *name == "" || *hosts == "" || *days < 1 {
		return usageErrorf("usage:\n%s", certUsage)
	}
	if strings.ContainsAny(*name, `/\`) {
		return errors.New("--name must not contain a path separator")
	}
	r := clusterauth.CertRequest{Name: *name, Hosts: splitList(*hosts), Valid: time.Duration(*days) * 24 * time.Hour}
	for _, s := range splitList(*ids) {
		id, err := strconv.ParseUint(s, 10, 64)
		if err != nil || id == 0 {
			return fmt.Errorf("--raft-id %q: want ids ≥ 1", s)
		}
		r.RaftIDs = append(r.RaftIDs, id)
	}
	caCert, err := os.ReadFile(filepath.Join(*caDir, "ca.pem"))
	if err != nil {
		return err
	}
	caKey, err := os.ReadFile(filepath.Join(*caDir, "ca.key"))
	if err != nil {
		return err
	}
	cert, key, err := clusterauth.NewNodeCert(caCert, caKey, r)
	if err != nil {
		return err
	}
	certPath, keyPath := filepath.Join(*out, *name+".pem"), filepath.Join(*out, *name+".key")
	if err := writeNew(keyPath, key, 0o600); err != nil {
		return err
	}
	if err := writeNew(certPath, cert, 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %s and %s; in the node's configuration:\n[repl_tls]\ncert = %q\nkey = %q\nca = %q\n",
		certPath, keyPath, certPath, keyPath, filepath.Join(*caDir, "ca.pem"))
	return nil
}

func certKey(args []string) error {
	fs := flag.NewFlagSet("cert key", flag.ContinueOnError)
	out := fs.String("out", "", "the new key file (mode 0600)")
	if _, err := parseArgs(fs, args, 0, certUsage); err != nil {
		return err
	}
	if *out == "" {
		return usageErrorf("usage:\n%s", certUsage)
	}
	b := make([]byte, clusterauth.MinKeyBytes)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	if err := writeNew(*out, []byte(hex.EncodeToString(b)+"\n"), 0o600); err != nil {
		return err
	}
	fmt.Printf("wrote %s: give it to every node of the cluster (--cluster-key %s, or cluster_key in the configuration)\n", *out, *out)
	return nil
}

func certSignKey(args []string) error {
	fs := flag.NewFlagSet("cert sign-key", flag.ContinueOnError)
	out := fs.String("out", "", "directory to write root-signing.key and root-public.pem to (created)")
	if _, err := parseArgs(fs, args, 0, certUsage); err != nil {
		return err
	}
	if *out == "" {
		return usageErrorf("usage:\n%s", certUsage)
	}
	priv, pub, err := headsig.NewKeyPair()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o700); err != nil {
		return err
	}
	privPath, pubPath := filepath.Join(*out, "root-signing.key"), filepath.Join(*out, "root-public.pem")
	if err := writeNew(privPath, priv, 0o600); err != nil {
		return err
	}
	if err := writeNew(pubPath, pub, 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %s (only on roots and HA root members: root_signing_key = %q)\nand %s (on every node: root_public_key = %q)\n",
		privPath, privPath, pubPath, pubPath)
	return nil
}
