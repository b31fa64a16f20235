package bench

import (
	"os"
	"os/exec"
	"syscall"
)

// setProcAttr puts a spawned server in a process group of its own, so
// that it and its children can be signaled together and a terminal's
// Ctrl-C reaches only this tool, which then stops them in order; and asks
// the kernel to kill it if this tool dies without stopping it.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// signalGroup sends SIGTERM, or SIGKILL if kill, to p's process group.
func signalGroup(p *os.Process, kill bool) error {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	return syscall.Kill(-p.Pid, sig)
}

// onTmpfs reports whether dir is on tmpfs.
func onTmpfs(dir string) bool {
	const tmpfsMagic = 0x01021994
	var st syscall.Statfs_t
	return syscall.Statfs(dir, &st) == nil && st.Type == tmpfsMagic
}
