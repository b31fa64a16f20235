//go:build !linux

package bench

import (
	"os"
	"os/exec"
)

func setProcAttr(cmd *exec.Cmd) {}

// signalGroup kills p itself: only Linux gets process groups here.
func signalGroup(p *os.Process, kill bool) error { return p.Kill() }

func onTmpfs(dir string) bool { return false }
