// Package tui holds what hiloop's full-screen views share: how a program is run so that quitting
// always gives the terminal back.
package tui

import (
	"errors"
	"sync"
	"time"

	tea "charm.land/bubbletea/v2"
)

// Quitter is how a model asks to quit, so that whoever runs its program knows it did.
type Quitter struct {
	once sync.Once
	done chan struct{}
}

// NewQuitter returns a quitter not yet asked.
func NewQuitter() *Quitter { return &Quitter{done: make(chan struct{})} }

// Quit records the request and returns the command that quits the program.
func (q *Quitter) Quit() tea.Cmd {
	q.once.Do(func() { close(q.done) })
	return tea.Quit
}

// Done is closed once Quit was called.
func (q *Quitter) Done() <-chan struct{} { return q.done }

// ErrStuck is Run's answer when the program did not end within the grace after the model quit.
var ErrStuck = errors.New("the terminal program did not end after quitting")

// QuitGrace is how long Run waits for a program to end once its model has quit.
const QuitGrace = 3 * time.Second

// Run runs p until it ends. Once q says the model quit, it waits at most grace for p to end and
// otherwise returns ErrStuck, leaving p behind: the caller gives the terminal back itself and
// ends. On a loaded machine a program was seen to clear its screen after a quit and never
// return; the user has quit, so the command must end.
func Run(p *tea.Program, q *Quitter, grace time.Duration) (tea.Model, error) {
	type result struct {
		m   tea.Model
		err error
	}
	done := make(chan result, 1)
	go func() {
		m, err := p.Run()
		done <- result{m, err}
	}()
	select {
	case r := <-done:
		return r.m, r.err
	case <-q.Done():
	}
	select {
	case r := <-done:
		return r.m, r.err
	case <-time.After(grace):
		return nil, ErrStuck
	}
}
