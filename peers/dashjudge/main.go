// dashjudge: Grafana's dashboard schema as a judge for deploy/dashboards/herald.json. Decodes each
// file named on the command line strictly (unknown fields, missing required fields and wrong types
// refused) into the dashboard types that github.com/grafana/grafana-foundation-sdk/go generates from
// Grafana's own schema, panel options and queries through the SDK's registered panel and datasource
// plugins, and prints one line per problem ("<file>: <path>: <message>"); exits 1 when any. A test
// peer, never shipped.
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

const sdk = "github.com/grafana/grafana-foundation-sdk/go"

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--version" {
		version := "unknown"
		if info, ok := debug.ReadBuildInfo(); ok {
			for _, dep := range info.Deps {
				if dep.Path == sdk {
					version = dep.Version
				}
			}
		}
		fmt.Printf("dashjudge: %s %s dashboard.UnmarshalJSONStrict\n", sdk, version)
		return
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: dashjudge DASHBOARD.json...")
		os.Exit(2)
	}
	plugins.RegisterDefaultPlugins()
	failed := false
	for _, file := range os.Args[1:] {
		raw, err := os.ReadFile(file)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		var d dashboard.Dashboard
		err = d.UnmarshalJSONStrict(raw)
		// NB: some generated decoders return an empty cog.BuildErrors as a non-nil error.
		var problems cog.BuildErrors
		if errors.As(err, &problems) {
			for _, p := range problems {
				fmt.Printf("%s: %s: %s\n", file, p.Path, p.Message)
			}
			failed = failed || len(problems) > 0
		} else if err != nil {
			fmt.Printf("%s: %s\n", file, err)
			failed = true
		}
		if d.Title == nil {
			fmt.Printf("%s: title: missing\n", file)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}
