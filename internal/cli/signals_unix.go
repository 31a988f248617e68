//go:build !windows

package cli

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"
)

// watchResize reports the terminal's size on every SIGWINCH.
func watchResize(tty *os.File) (<-chan [2]uint16, func()) {
	out := make(chan [2]uint16, 1)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGWINCH)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-sig:
				if w, h, err := term.GetSize(int(tty.Fd())); err == nil {
					select {
					case out <- [2]uint16{uint16(h), uint16(w)}:
					default:
					}
				}
			}
		}
	}()
	return out, func() { signal.Stop(sig); close(done) }
}

// forwardSignals turns SIGINT, SIGTERM and SIGHUP sent to hiloop into signals for the command.
func forwardSignals() (<-chan int, func()) {
	out := make(chan int, 4)
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case s := <-sig:
				select {
				case out <- int(s.(syscall.Signal)):
				default:
				}
			}
		}
	}()
	return out, func() { signal.Stop(sig); close(done) }
}
