package fake

import (
	"bytes"
	"encoding/json"
	"testing"
)

// checkRecord fails unless a record is saved as json.MarshalIndent encodes it.
func checkRecord(t *testing.T, rec record) {
	t.Helper()
	want, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.appendIndented(nil); !bytes.Equal(got, want) {
		t.Fatalf("appendIndented(%+v) =\n%s\njson.MarshalIndent:\n%s", rec, got, want)
	}
}

func TestRecordEncodingIsMarshalIndent(t *testing.T) {
	odd := "a <b> & \"c\" \\ \t\n\x00 é \u2028 \xff"
	for _, rec := range []record{
		{},
		{ID: "fake-0123", Cwd: "/workspace", Turns: []turnRecord{}},
		{ID: "fake-0123", Cwd: "/workspace", Turns: []turnRecord{{Prompt: "hello"}}},
		{ID: "fake-0123", Cwd: "/workspace", Turns: []turnRecord{
			{Prompt: "hello", Replies: []string{"echo: hello"}},
			{Prompt: "run chatty.fake", Replies: []string{"chunk 1", "chunk 2", "end"}},
			{Prompt: "", Replies: []string{}},
			{Prompt: odd, Replies: []string{odd, ""}},
		}},
		{ID: odd, Cwd: odd, Turns: []turnRecord{{Prompt: "x", Replies: []string{"y"}}}},
	} {
		checkRecord(t, rec)
	}
}

func FuzzRecordEncoding(f *testing.F) {
	f.Add("fake-0123", "/workspace", "run x", "chunk 1", "chunk 2", false)
	f.Add("", "", "<&>", "\xff", "\u2028", true)
	f.Fuzz(func(t *testing.T, id, cwd, prompt, r1, r2 string, noReplies bool) {
		turn := turnRecord{Prompt: prompt, Replies: []string{r1, r2}}
		if noReplies {
			turn.Replies = nil
		}
		checkRecord(t, record{ID: id, Cwd: cwd, Turns: []turnRecord{turn, {Prompt: r2, Replies: []string{prompt}}}})
	})
}
