//go:build !qsfailpoints

package tests

// qsBuildTags are the build tags the qs under test is built with: none,
// the release build.
const qsBuildTags = ""
