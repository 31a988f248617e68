// Package units prints sizes the one way hiloop prints them, in the CLI's tables and in the
// daemon's messages alike.
package units

import (
	"strconv"
	"strings"
)

// Bytes prints n in binary units: whole numbers bare ("10 GiB"), one decimal below 100
// ("1.5 GiB"), rounded from 100 up ("315 MiB"), bytes as "512 B".
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	num := strconv.FormatFloat(v, 'f', 0, 64)
	if v < 100 {
		num = strings.TrimSuffix(strconv.FormatFloat(v, 'f', 1, 64), ".0")
	}
	return num + " " + string("KMGTPE"[exp]) + "iB"
}
