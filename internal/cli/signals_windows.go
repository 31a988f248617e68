package cli

import (
	"os"
	"os/signal"
	"time"

	"golang.org/x/term"
)

// watchResize polls the console's size: Windows has no SIGWINCH.
func watchResize(tty *os.File) (<-chan [2]uint16, func()) {
	out := make(chan [2]uint16, 1)
	done := make(chan struct{})
	go func() {
		w0, h0, _ := term.GetSize(int(tty.Fd()))
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if w, h, err := term.GetSize(int(tty.Fd())); err == nil && (w != w0 || h != h0) {
					w0, h0 = w, h
					select {
					case out <- [2]uint16{uint16(h), uint16(w)}:
					default:
					}
				}
			}
		}
	}()
	return out, func() { close(done) }
}

// forwardSignals turns Ctrl-C into SIGINT (2) for the command.
func forwardSignals() (<-chan int, func()) {
	out := make(chan int, 4)
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, os.Interrupt)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-sig:
				select {
				case out <- 2:
				default:
				}
			}
		}
	}()
	return out, func() { signal.Stop(sig); close(done) }
}
