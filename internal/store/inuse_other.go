//go:build !unix

package store

// inUse returns err unchanged where lock holders cannot be asked.
func inUse(_ string, err error) error { return err }
