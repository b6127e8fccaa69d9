// ringjudge: the OpenTelemetry target allocator's consistent-hashing ring, as
// open-telemetry/opentelemetry-operator cmd/otel-allocator/internal/allocation/consistent_hashing.go
// (be8944414a876f17fcdeb5a59b86b8866fb5c88e) builds it — github.com/buraksezer/consistent with 1061
// partitions, replication factor 5, load 1.1, hashed with cespare/xxhash — for herald's tests to
// compare placements with. Reads {"members": [...], "keys": [...]} on stdin and prints the member
// owning each key, one per line (LocateKey).
//
//	echo '{"members":["a","b"],"keys":["10.0.0.1:8080"]}' | ringjudge
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"

	"github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"
)

type hasher struct{}

func (hasher) Sum64(data []byte) uint64 { return xxhash.Sum64(data) }

type member string

func (m member) String() string { return string(m) }

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		fmt.Println("ringjudge: " + version())
		return
	}
	var in struct {
		Members []string `json:"members"`
		Keys    []string `json:"keys"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintln(os.Stderr, "ringjudge: "+err.Error())
		os.Exit(1)
	}
	members := make([]consistent.Member, 0, len(in.Members))
	for _, m := range in.Members {
		members = append(members, member(m))
	}
	// The allocator's config (newConsistentHashingStrategy).
	c := consistent.New(members, consistent.Config{
		PartitionCount:    1061,
		ReplicationFactor: 5,
		Load:              1.1,
		Hasher:            hasher{},
	})
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for _, k := range in.Keys {
		owner := c.LocateKey([]byte(k))
		if owner == nil {
			fmt.Fprintln(out, "")
			continue
		}
		fmt.Fprintln(out, owner.String())
	}
}

func version() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, d := range info.Deps {
			if d.Path == "github.com/buraksezer/consistent" {
				return "github.com/buraksezer/consistent " + d.Version
			}
		}
	}
	return "unknown"
}
