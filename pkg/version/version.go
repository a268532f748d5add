package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set by the linker (-ldflags -X); see the package documentation.
var (
	version string
	commit  string
)

// Info describes a build.
type Info struct {
	// Version is the gpushare version, "(devel)" when neither the linker
	// nor the toolchain set one.
	Version string
	// Commit is the full commit hash the binary was built from, empty
	// when unknown.
	Commit string
	// Modified says the tree had uncommitted changes.
	Modified bool
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string
}

// Get returns the running binary's build information.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return fromBuildInfo(bi, version, commit)
}

// fromBuildInfo fills Info from the linker's values, falling back to the
// toolchain's build information (bi may be nil).
func fromBuildInfo(bi *debug.BuildInfo, version, commit string) Info {
	info := Info{Version: version, Commit: commit, GoVersion: runtime.Version()}
	if bi == nil {
		if info.Version == "" {
			info.Version = "(devel)"
		}
		return info
	}
	info.GoVersion = bi.GoVersion
	if info.Version == "" {
		info.Version = bi.Main.Version
	}
	if info.Version == "" {
		info.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if info.Commit == "" {
				info.Commit = s.Value
			}
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}

// String formats the build as "v1.2.3 (commit 0123456789ab, go1.26.1)".
func (i Info) String() string {
	var b strings.Builder
	b.WriteString(i.Version)
	b.WriteString(" (")
	if i.Commit != "" {
		fmt.Fprintf(&b, "commit %s", short(i.Commit))
		if i.Modified && !strings.HasSuffix(i.Version, "+dirty") {
			b.WriteString(", modified")
		}
		b.WriteString(", ")
	}
	b.WriteString(i.GoVersion)
	b.WriteString(")")
	return b.String()
}

// short abbreviates a commit hash to the 12 digits of Go pseudo-versions.
func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

// Line is what a command's --version prints: its name and the build.
func Line(command string) string {
	return command + " " + Get().String()
}

// Dependency returns the version of module path the binary was built
// with, empty when it was not (or has no build information).
func Dependency(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			if d.Replace != nil && d.Replace.Version != "" {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return ""
}
