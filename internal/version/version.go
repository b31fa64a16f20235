// Package version holds the product's version, the one number that
// `qs version`, the memcached VERSION command and the status page report.
package version

// Version is the release of this build, X.Y.Z. A release build may set it
// with -ldflags "-X github.com/quicksilver-kv/qs/internal/version.Version=X.Y.Z".
var Version = "0.9.0"
