package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// tokenEnv names the environment variable holding a producer token for the
// client commands (qs put, del); --token-file takes precedence. A token is
// never taken from the command line, where ps would show it.
const tokenEnv = "QS_TOKEN"

// readToken returns the producer token from file (if set) or $QS_TOKEN;
// empty when neither is set.
func readToken(file string) (string, error) {
	if file == "" {
		return strings.TrimSpace(os.Getenv(tokenEnv)), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", errors.New("token file " + file + " is empty")
	}
	return t, nil
}
