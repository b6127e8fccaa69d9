// tajudge: the OpenTelemetry collector's Prometheus receiver, built from its own Go module
// (github.com/open-telemetry/opentelemetry-collector-contrib/receiver/prometheusreceiver), pointed at a
// target allocator (herald) with a collector_id. Its target-allocator client
// (internal/targetallocator/manager.go) fetches /scrape_configs, then polls
// /jobs/{job}/targets?collector_id=ID through Prometheus's http_sd; the receiver's Prometheus API
// (api_server) then lists the targets its scrape manager holds. tajudge prints them as JSON once they
// have stopped changing, for the Rust tests to compare with what herald assigned to that collector.
//
//	tajudge -endpoint http://127.0.0.1:PORT -collector-id ID [-settle 3s] [-timeout 60s]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"reflect"
	"runtime/debug"
	"sort"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/receiver/prometheusreceiver"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"
)

// target is one active target as the receiver's Prometheus API reports it.
type target struct {
	ScrapePool       string            `json:"scrapePool"`
	DiscoveredLabels map[string]string `json:"discoveredLabels"`
}

func main() {
	endpoint := flag.String("endpoint", "", "the target allocator's base URL (loopback)")
	collectorID := flag.String("collector-id", "", "this collector's id (its pod name under the allocator)")
	settle := flag.Duration("settle", 3*time.Second, "print once the target list has not changed for this long")
	timeout := flag.Duration("timeout", 60*time.Second, "give up after this long")
	expectJobs := flag.Int("expect-jobs", 1, "wait until the receiver holds at least this many scrape pools")
	version := flag.Bool("version", false, "print the receiver module's version")
	flag.Parse()
	if *version {
		fmt.Println("tajudge (prometheusreceiver " + moduleVersion() + ")")
		return
	}
	if *endpoint == "" || *collectorID == "" {
		fail("-endpoint and -collector-id are required")
	}
	if err := run(*endpoint, *collectorID, *settle, *timeout, *expectJobs); err != nil {
		fail(err.Error())
	}
}

func run(endpoint, collectorID string, settle, timeout time.Duration, expectJobs int) error {
	apiAddr, err := freeLoopback()
	if err != nil {
		return err
	}
	factory := prometheusreceiver.NewFactory()
	cfg := factory.CreateDefaultConfig().(*prometheusreceiver.Config)
	// The same keys a collector's YAML config uses (the internal config types cannot be named here).
	conf := confmap.NewFromStringMap(map[string]any{
		"target_allocator": map[string]any{
			"endpoint":       endpoint,
			"interval":       "1s",
			"collector_id":   collectorID,
			"http_sd_config": map[string]any{"refresh_interval": "1s"},
		},
		"api_server": map[string]any{
			"enabled":       true,
			"server_config": map[string]any{"endpoint": apiAddr},
		},
	})
	if err := conf.Unmarshal(cfg); err != nil {
		return fmt.Errorf("receiver config: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("receiver config: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rcv, err := factory.CreateMetrics(ctx, receivertest.NewNopSettings(factory.Type()), cfg, consumertest.NewNop())
	if err != nil {
		return fmt.Errorf("create receiver: %w", err)
	}
	if err := rcv.Start(ctx, componenttest.NewNopHost()); err != nil {
		return fmt.Errorf("start receiver: %w", err)
	}
	defer func() { _ = rcv.Shutdown(context.Background()) }()

	var last []target
	var pools int
	changed := time.Now()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out after %s: %d targets in %d scrape pools (expected %d pools)", timeout, len(last), pools, expectJobs)
		case <-time.After(200 * time.Millisecond):
		}
		got, err := activeTargets(apiAddr)
		if err != nil {
			continue
		}
		if !reflect.DeepEqual(got, last) {
			last, changed = got, time.Now()
			seen := map[string]bool{}
			for _, t := range got {
				seen[t.ScrapePool] = true
			}
			pools = len(seen)
			continue
		}
		if pools >= expectJobs && time.Since(changed) >= settle {
			out, _ := json.Marshal(last)
			fmt.Println(string(out))
			return nil
		}
	}
}

// activeTargets reads the receiver's /api/v1/targets, sorted for comparison.
func activeTargets(addr string) ([]target, error) {
	resp, err := http.Get("http://" + addr + "/api/v1/targets?state=active")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var parsed struct {
		Data struct {
			ActiveTargets []target `json:"activeTargets"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &parsed); err != nil {
		return nil, fmt.Errorf("api/v1/targets: %w", err)
	}
	ts := parsed.Data.ActiveTargets
	if ts == nil {
		ts = []target{}
	}
	sort.Slice(ts, func(i, j int) bool {
		if ts[i].ScrapePool != ts[j].ScrapePool {
			return ts[i].ScrapePool < ts[j].ScrapePool
		}
		return ts[i].DiscoveredLabels["__address__"] < ts[j].DiscoveredLabels["__address__"]
	})
	return ts, nil
}

func freeLoopback() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func moduleVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, d := range info.Deps {
			if d.Path == "github.com/open-telemetry/opentelemetry-collector-contrib/receiver/prometheusreceiver" {
				return d.Version
			}
		}
	}
	return "unknown"
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "tajudge: "+msg)
	os.Exit(1)
}
