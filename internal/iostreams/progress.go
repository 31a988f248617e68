package iostreams

import (
	"fmt"
	"io"
	"sync"
	"time"

	"charm.land/bubbles/v2/progress"
	"charm.land/bubbles/v2/spinner"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"
)

// Progress shows how far a long operation is on one line of a terminal's stderr, redrawn in
// place: a spinner with the time taken until the fraction done is known, then a bar. Stop clears
// the line. Off a terminal it draws nothing, and lines printed through it go out as they are.
// Its methods are safe to call from several goroutines.
type Progress struct {
	mu       sync.Mutex
	w        io.Writer
	live     bool // stderr is a terminal: draw
	label    string
	fraction float64 // < 0 until known
	detail   string
	bar      progress.Model
	spin     spinner.Spinner
	frame    int
	start    time.Time
	width    int
	dim      lipgloss.Style
	drawn    bool // the line holds a drawing Stop must clear
	stopped  bool
	quit     chan struct{}
	done     chan struct{}
}

// maxBarWidth keeps a bar readable on a wide terminal.
const maxBarWidth = 40

// StartProgress starts showing progress labelled label ("sealing web-20261129-101500") on
// stderr, as a spinner until Set gives the fraction done. Call Stop when the operation ends.
func (s *IOStreams) StartProgress(label string) *Progress {
	st := s.StylesStderr()
	p := &Progress{
		w:        s.ErrOut,
		live:     s.canRedraw(),
		label:    label,
		fraction: -1,
		spin:     spinner.MiniDot,
		start:    time.Now(),
		width:    s.TerminalWidth(),
		dim:      st.Dim,
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	p.bar = progress.New(progress.WithWidth(maxBarWidth), progress.WithFillCharacters('█', '░'))
	p.bar.FullColor, p.bar.EmptyColor = st.ProgressFull, st.ProgressEmpty
	if !p.live {
		close(p.done)
		return p
	}
	p.mu.Lock()
	p.draw()
	p.mu.Unlock()
	go p.animate()
	return p
}

// Live reports whether the progress is drawn (stderr is a terminal that redraws a line), so that
// a caller need not ask the daemon for figures nobody will see.
func (p *Progress) Live() bool { return p.live }

// animate turns the spinner and the clock until Stop.
func (p *Progress) animate() {
	defer close(p.done)
	t := time.NewTicker(p.spin.FPS)
	defer t.Stop()
	for {
		select {
		case <-p.quit:
			return
		case <-t.C:
			p.mu.Lock()
			p.frame++
			p.draw()
			p.mu.Unlock()
		}
	}
}

// Set shows fraction (0 to 1) of the work as done, with detail ("1.2 GiB / 4.0 GiB") after it.
func (p *Progress) Set(fraction float64, detail string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fraction, p.detail = min(max(fraction, 0), 1), detail
	p.draw()
}

// Println writes line to stderr above the progress, which is drawn again below it.
func (p *Progress) Println(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	fmt.Fprintln(p.w, line)
	p.draw()
}

// Stop clears the progress from the terminal; it may be called more than once.
func (p *Progress) Stop() {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return
	}
	p.stopped = true
	if p.live {
		close(p.quit)
	}
	p.mu.Unlock()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
}

// draw redraws the line; the caller holds p.mu.
func (p *Progress) draw() {
	if !p.live || p.stopped {
		return
	}
	line := p.render()
	// A line longer than the terminal would wrap, and "\r" would redraw only its last part.
	line = ansi.Truncate(line, p.width-1, "…")
	io.WriteString(p.w, "\r"+line+ansi.EraseLineRight)
	p.drawn = true
}

func (p *Progress) render() string {
	if p.fraction < 0 {
		frame := p.spin.Frames[p.frame%len(p.spin.Frames)]
		elapsed := time.Since(p.start).Truncate(time.Second)
		return frame + " " + p.label + " " + p.dim.Render(fmt.Sprintf("(%s)", elapsed))
	}
	detail := ""
	if p.detail != "" {
		detail = "  " + p.dim.Render(p.detail)
	}
	// The bar takes what the label and the detail leave, within reason.
	room := p.width - 1 - ansi.StringWidth(p.label) - 1 - ansi.StringWidth(detail)
	p.bar.SetWidth(min(maxBarWidth, max(10, room)))
	return p.label + " " + p.bar.ViewAs(p.fraction) + detail
}

// clear erases a drawn line; the caller holds p.mu.
func (p *Progress) clear() {
	if p.drawn {
		io.WriteString(p.w, "\r"+ansi.EraseLineRight)
		p.drawn = false
	}
}
