package version

import (
	"runtime/debug"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFromBuildInfo(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	stamped := &debug.BuildInfo{
		GoVersion: "go1.26.1",
		Main:      debug.Module{Path: "github.com/gpushare/gpushare", Version: "v0.0.0-20261124101500-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: rev},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	cases := map[string]struct {
		bi              *debug.BuildInfo
		version, commit string
		want            Info
		line            string
	}{
		"toolchain stamp": {
			bi:   stamped,
			want: Info{Version: "v0.0.0-20261124101500-0123456789ab+dirty", Commit: rev, Modified: true, GoVersion: "go1.26.1"},
			line: "v0.0.0-20261124101500-0123456789ab+dirty (commit 0123456789ab, go1.26.1)",
		},
		"linker version wins": {
			bi:      stamped,
			version: "v1.2.3",
			want:    Info{Version: "v1.2.3", Commit: rev, Modified: true, GoVersion: "go1.26.1"},
			line:    "v1.2.3 (commit 0123456789ab, modified, go1.26.1)",
		},
		"no vcs": {
			bi:   &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "(devel)"}},
			want: Info{Version: "(devel)", GoVersion: "go1.26.1"},
			line: "(devel) (go1.26.1)",
		},
		"linker commit without vcs": {
			bi:      &debug.BuildInfo{GoVersion: "go1.26.1"},
			version: "v1.2.3",
			commit:  "abc",
			want:    Info{Version: "v1.2.3", Commit: "abc", GoVersion: "go1.26.1"},
			line:    "v1.2.3 (commit abc, go1.26.1)",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := fromBuildInfo(tc.bi, tc.version, tc.commit)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("fromBuildInfo (-want,+got):\n%s", diff)
			}
			if s := got.String(); s != tc.line {
				t.Errorf("String() = %q, want %q", s, tc.line)
			}
		})
	}
}

func TestGet(t *testing.T) {
	info := Get()
	if info.Version == "" || info.GoVersion == "" {
		t.Errorf("Get() = %+v: want a version and a Go version", info)
	}
}
