package chat

import (
	"fmt"
	"strings"
)

// diffOp is one line of a line diff.
type diffOp struct {
	op   byte // ' ', '-' or '+'
	text string
}

// maxDiffCells bounds the LCS table of the changed middle of two texts; past it the middle is
// shown as removed then added, which is correct if not minimal.
const maxDiffCells = 4 << 20

// lineDiff diffs two texts line by line: common prefix and suffix first, then a longest common
// subsequence of what is left.
func lineDiff(oldText, newText string) []diffOp {
	a, b := splitLines(oldText), splitLines(newText)
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	ops := make([]diffOp, 0, len(a)+len(b)-pre-suf)
	for _, l := range a[:pre] {
		ops = append(ops, diffOp{' ', l})
	}
	ops = append(ops, lcsDiff(a[pre:len(a)-suf], b[pre:len(b)-suf])...)
	for _, l := range a[len(a)-suf:] {
		ops = append(ops, diffOp{' ', l})
	}
	return ops
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

func lcsDiff(a, b []string) []diffOp {
	n, m := len(a), len(b)
	var ops []diffOp
	if n == 0 || m == 0 || (n+1)*(m+1) > maxDiffCells {
		for _, l := range a {
			ops = append(ops, diffOp{'-', l})
		}
		for _, l := range b {
			ops = append(ops, diffOp{'+', l})
		}
		return ops
	}
	// lcs[i][j] is the LCS length of a[i:] and b[j:].
	w := m + 1
	lcs := make([]int32, (n+1)*w)
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i*w+j] = lcs[(i+1)*w+j+1] + 1
			} else {
				lcs[i*w+j] = max(lcs[(i+1)*w+j], lcs[i*w+j+1])
			}
		}
	}
	i, j := 0, 0
	for i < n && j < m {
		switch {
		case a[i] == b[j]:
			ops = append(ops, diffOp{' ', a[i]})
			i++
			j++
		case lcs[(i+1)*w+j] >= lcs[i*w+j+1]:
			ops = append(ops, diffOp{'-', a[i]})
			i++
		default:
			ops = append(ops, diffOp{'+', b[j]})
			j++
		}
	}
	for ; i < n; i++ {
		ops = append(ops, diffOp{'-', a[i]})
	}
	for ; j < m; j++ {
		ops = append(ops, diffOp{'+', b[j]})
	}
	return ops
}

// unifiedDiff renders ops as unified diff hunks with context lines of context: "@@ -a,b +c,d @@"
// headers, then lines starting with ' ', '-' or '+'. It also returns the counts of added and
// removed lines.
func unifiedDiff(ops []diffOp, context int) (lines []string, added, removed int) {
	// Line numbers in the old and new text before each op.
	type pos struct{ a, b int }
	at := make([]pos, len(ops)+1)
	for i, o := range ops {
		at[i+1] = at[i]
		if o.op != '+' {
			at[i+1].a++
		}
		if o.op != '-' {
			at[i+1].b++
		}
		switch o.op {
		case '+':
			added++
		case '-':
			removed++
		}
	}
	for i := 0; i < len(ops); {
		if ops[i].op == ' ' {
			i++
			continue
		}
		start := max(0, i-context)
		end := i
		// Extend the hunk while the next change is within 2*context lines of the last one.
		for end < len(ops) {
			if ops[end].op != ' ' {
				end++
				continue
			}
			k := end
			for k < len(ops) && ops[k].op == ' ' {
				k++
			}
			if k == len(ops) || k-end > 2*context {
				end = min(len(ops), end+context)
				break
			}
			end = k
		}
		oldLen, newLen := at[end].a-at[start].a, at[end].b-at[start].b
		lines = append(lines, fmt.Sprintf("@@ -%s +%s @@", hunkRange(at[start].a, oldLen), hunkRange(at[start].b, newLen)))
		for _, o := range ops[start:end] {
			lines = append(lines, string(o.op)+o.text)
		}
		i = end
	}
	return lines, added, removed
}

// hunkRange is "start,len" as diff(1) writes it: 1-based, and the line before for an empty range.
func hunkRange(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	if n == 1 {
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}
