package tui

import (
	"bytes"
	"errors"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/hiloop/hiloop/internal/testenv"
)

// quitsAtOnce quits on its first message.
type quitsAtOnce struct{ q *Quitter }

func (m quitsAtOnce) Init() tea.Cmd                       { return func() tea.Msg { return "go" } }
func (m quitsAtOnce) Update(tea.Msg) (tea.Model, tea.Cmd) { return m, m.q.Quit() }
func (m quitsAtOnce) View() tea.View                      { return tea.NewView("") }

func TestRunReturnsWhenTheProgramEnds(t *testing.T) {
	q := NewQuitter()
	p := tea.NewProgram(quitsAtOnce{q}, tea.WithInput(nil), tea.WithOutput(&bytes.Buffer{}))
	done := make(chan error, 1)
	go func() {
		_, err := Run(p, q, QuitGrace)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-testenv.Deadline(t):
		t.Fatal("Run did not return after the model quit")
	}
	select {
	case <-q.Done():
	default:
		t.Error("the quitter was not told")
	}
}

// A program that never ends after its model quit: Run gives up after the grace.
func TestRunGivesUpOnAStuckProgram(t *testing.T) {
	q := NewQuitter()
	q.Quit()
	block := make(chan struct{})
	defer close(block)
	p := tea.NewProgram(blocks{block}, tea.WithInput(nil), tea.WithOutput(&bytes.Buffer{}))
	if _, err := Run(p, q, 50*time.Millisecond); !errors.Is(err, ErrStuck) {
		t.Fatalf("Run = %v, want ErrStuck", err)
	}
}

// blocks never lets its program end: its Init's update waits until block is closed.
type blocks struct{ block chan struct{} }

func (m blocks) Init() tea.Cmd { return nil }
func (m blocks) Update(tea.Msg) (tea.Model, tea.Cmd) {
	<-m.block
	return m, nil
}
func (m blocks) View() tea.View { return tea.NewView("") }
