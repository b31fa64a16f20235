package client_test

import "os"

func tempDir() string {
	d, err := os.MkdirTemp("", "qs-client-example-")
	if err != nil {
		panic(err)
	}
	return d
}
