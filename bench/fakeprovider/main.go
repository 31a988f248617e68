// Command fakeprovider is bench/route.sh's model provider: internal/fakeprovider (the Anthropic
// and OpenAI wire formats, scripted answers) on the host's loopback, for the model route to
// forward to.
//
//	fakeprovider DIR KEY   serve until killed; writes DIR/url (plain HTTP) once listening
//
// KEY is the Anthropic API key it accepts. GET URL/_fake/requests lists what it received, with
// the time each request arrived.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/hiloop/hiloop/internal/fakeprovider"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: fakeprovider DIR KEY")
		os.Exit(2)
	}
	s := fakeprovider.New(fakeprovider.Config{AnthropicKeys: []string{os.Args[2]}})
	if err := s.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "fakeprovider:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(filepath.Join(os.Args[1], "url"), []byte(s.URL()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "fakeprovider:", err)
		os.Exit(1)
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
	<-c
	s.Close()
}
