package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/quicksilver-kv/qs/internal/version"
)

func init() {
	register("version", "print the version of this binary", cmdVersion)
}

func cmdVersion(args []string) error {
	if len(args) > 0 {
		return usageErrorf("usage: qs version (no arguments, got %q)", args)
	}
	fmt.Println(versionLine(version.Version, runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH, buildRevision()))
	return nil
}

// versionLine is the line `qs version` prints: "qs X.Y.Z (go, os/arch,
// commit C)", the commit left out when the build does not record it.
func versionLine(v, goVersion, platform, revision string) string {
	if revision != "" {
		return fmt.Sprintf("qs %s (%s, %s, commit %s)", v, goVersion, platform, revision)
	}
	return fmt.Sprintf("qs %s (%s, %s)", v, goVersion, platform)
}

// buildRevision is the VCS commit the binary was built from (12 hex
// digits, "+dirty" if the tree had changes), or "" if not recorded.
func buildRevision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
}
