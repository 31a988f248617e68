//go:build linux

package volume

import (
	"reflect"
	"testing"
)

func TestParseMountinfo(t *testing.T) {
	in := `22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw,errors=continue
40 22 7:0 / /var/lib/x/mnt/sb-1 rw,nodev,relatime shared:20 - xfs /dev/loop0 rw,attr2,inode64
41 22 0:50 / /tmp/with\040space\134x rw - tmpfs tmp\040fs rw
`
	got, err := parseMountinfo([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []mount{
		{Target: "/", FSType: "ext4", Source: "/dev/vda", Optional: "shared:1"},
		{Target: "/mnt/parent", FSType: "ext3", Source: "/dev/root", Optional: "master:1"},
		{Target: "/var/lib/x/mnt/sb-1", FSType: "xfs", Source: "/dev/loop0", Optional: "shared:20"},
		{Target: `/tmp/with space\x`, FSType: "tmpfs", Source: "tmp fs"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseMountinfo:\n got %+v\nwant %+v", got, want)
	}
	if _, err := parseMountinfo([]byte("1 2 3\n")); err == nil {
		t.Error("parseMountinfo accepted a malformed line")
	}
}
