package units

import "testing"

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0:                   "0 B",
		1023:                "1023 B",
		1024:                "1 KiB",
		1536:                "1.5 KiB",
		4 << 30:             "4 GiB",
		50 << 30:            "50 GiB",
		314*(1<<20) + 700e3: "315 MiB",
		99*(1<<20) + 1000:   "99 MiB",
		99*(1<<20) + 600e3:  "99.6 MiB",
		3 << 40:             "3 TiB",
	} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}
