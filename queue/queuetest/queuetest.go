// Package queuetest runs an embedded NATS server with JetStream for other packages' tests of the queue.
package queuetest

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Server is an embedded NATS server with JetStream enabled, listening on 127.0.0.1 only, storing its streams in a
// folder of the test's (file storage).
type Server struct {
	t    testing.TB
	dir  string
	port int
	s    *server.Server
}

// Start starts a server on a free port, shut down when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	ns := &Server{t: t, dir: t.TempDir(), port: -1}
	ns.Restart()
	t.Cleanup(ns.Stop)
	return ns
}

// Restart starts the server again after Stop: the same port, the same store.
func (ns *Server) Restart() {
	ns.t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: ns.port, JetStream: true, StoreDir: ns.dir, NoLog: true, NoSigs: true}
	s, err := server.NewServer(opts)
	if err != nil {
		ns.t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		ns.t.Fatal("queuetest: the NATS server is not ready after 10 s")
	}
	ns.s, ns.port = s, s.Addr().(*net.TCPAddr).Port
}

// Stop shuts the server down (a clean shutdown: its store is synced).
func (ns *Server) Stop() {
	if ns.s != nil {
		ns.s.Shutdown()
		ns.s.WaitForShutdown()
		ns.s = nil
	}
}

// URL is the server's client URL.
func (ns *Server) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", ns.port) }
