package runtime

import (
	"strings"
	"testing"

	"github.com/hiloop/hiloop/internal/testenv"
)

func testCertPEM(t testing.TB, cn string) string { return string(testenv.CAPEM(t, cn)) }

func TestParseCAs(t *testing.T) {
	a, b := testCertPEM(t, "a"), testCertPEM(t, "b")
	for _, tc := range []struct {
		name, in, want, err string
	}{
		{name: "two", in: a + "\n" + b, want: a + b},
		{name: "comments around", in: "# corp\n" + a + "trailing words\n", want: a},
		{name: "no final newline", in: strings.TrimSuffix(a, "\n"), want: a},
		{name: "empty", in: "", err: "no PEM certificate"},
		{name: "text", in: "not a certificate\n", err: "no PEM certificate"},
		{name: "a key", in: a + "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", err: `block 2 is a "PRIVATE KEY"`},
		{name: "garbage in a block", in: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", err: "certificate 1:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCAs([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseCAs = %q, %v; want an error with %q", got, err, tc.err)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("ParseCAs = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestMissingCAs(t *testing.T) {
	image, corp, proxy, gateway := testCertPEM(t, "image root"), testCertPEM(t, "corp"), testCertPEM(t, "proxy"), testCertPEM(t, "gateway")
	names := func(b string, trusted ...string) string {
		var tb [][]byte
		for _, s := range trusted {
			tb = append(tb, []byte(s))
		}
		var out []string
		for _, c := range MissingCAs([]byte(b), tb...) {
			out = append(out, c.Subject.CommonName)
		}
		return strings.Join(out, ",")
	}
	host := image + corp + proxy + corp
	if got := names(host, image); got != "corp,proxy" {
		t.Errorf("host beyond the image = %q, want corp,proxy (each once)", got)
	}
	if got := names(host, image, gateway+proxy); got != "corp" {
		t.Errorf("with proxy added = %q, want corp", got)
	}
	if got := names(host, image, host); got != "" {
		t.Errorf("with the host's bundle added = %q, want none", got)
	}
	if got := names(image); got != "image root" {
		t.Errorf("nothing trusted = %q, want image root", got)
	}
}
