//go:build qsfailpoints

package tests

// qsBuildTags are the build tags the qs under test is built with: the
// tests built with the failpoints run a qs that has them.
const qsBuildTags = "qsfailpoints"
