// Package server wires a qs process together: it opens the configured
// databases, gives each its role, and serves them over HTTP and the
// memcached protocol on TCP and Unix sockets, taking listeners from systemd
// socket activation when present.
//
// Every goroutine of the server is started with Server.goFunc and waited for
// by Shutdown, so a stopped server leaves nothing running.
package server
