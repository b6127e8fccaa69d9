// promsd: Prometheus's own kubernetes_sd (github.com/prometheus/prometheus/discovery/kubernetes) run as
// a library, serving the target groups its Discoverer sends as JSON on a loopback HTTP port. herald's
// /sd/v1 bodies are held to what this prints: it is Prometheus's label code, not a copy of it.
//
//	promsd --config sd.yml --listen 127.0.0.1:PORT [--watch-list true|false]
//
// sd.yml is one kubernetes_sd_configs entry as a Prometheus config holds it (role, kubeconfig_file,
// namespaces, selectors, attach_metadata), decoded by the SDConfig's own UnmarshalYAML, so it is
// validated as Prometheus validates it. --watch-list sets client-go's KUBE_FEATURE_WatchListClient
// (Prometheus's own tests turn it off: its informers wait forever for an initial-events-end bookmark
// that never comes).
//
// HTTP (loopback only):
//
//	GET /healthz                 200 once the Discoverer runs
//	GET /targets?quiet_ms=N      the current target groups once the Discoverer has sent at least one
//	                             update and none for N ms (default 500); 503 if that does not happen
//	                             within timeout_ms (default 30000)
//
// The body of /targets is {"updates": U, "groups": [{"source", "labels", "targets": [labelset]}]}:
// every group the Discoverer has sent, the latest per source (empty groups included, as Prometheus's
// discovery manager keeps them), sorted by source. Settling is the caller's question: it may ask
// again until what it compares is equal.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/discovery/kubernetes"
	"github.com/prometheus/prometheus/discovery/targetgroup"
	"go.yaml.in/yaml/v2"
)

// version names what this is built from; the modules' versions are in go.mod.
const version = "promsd: github.com/prometheus/prometheus v0.316.0 discovery/kubernetes"

// groups holds the latest target group per source and when the last update arrived.
type groups struct {
	mu      sync.Mutex
	bySrc   map[string]*targetgroup.Group
	updates int
	last    time.Time
	changed chan struct{} // closed and replaced on every update
}

func (g *groups) apply(update []*targetgroup.Group) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, tg := range update {
		if tg == nil {
			continue
		}
		g.bySrc[tg.Source] = tg
	}
	g.updates++
	g.last = time.Now()
	close(g.changed)
	g.changed = make(chan struct{})
}

type groupJSON struct {
	Source  string              `json:"source"`
	Labels  map[string]string   `json:"labels"`
	Targets []map[string]string `json:"targets"`
}

type targetsJSON struct {
	Updates int         `json:"updates"`
	Groups  []groupJSON `json:"groups"`
}

// snapshot returns the groups if at least one update arrived and none for quiet, else the channel
// closed by the next update and how long until the current quiet period ends.
func (g *groups) snapshot(quiet time.Duration) (*targetsJSON, <-chan struct{}, time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.updates == 0 {
		return nil, g.changed, quiet
	}
	if wait := quiet - time.Since(g.last); wait > 0 {
		return nil, g.changed, wait
	}
	out := &targetsJSON{Updates: g.updates, Groups: []groupJSON{}}
	for src, tg := range g.bySrc {
		gj := groupJSON{Source: src, Labels: map[string]string{}, Targets: []map[string]string{}}
		for k, v := range tg.Labels {
			gj.Labels[string(k)] = string(v)
		}
		for _, t := range tg.Targets {
			m := map[string]string{}
			for k, v := range t {
				m[string(k)] = string(v)
			}
			gj.Targets = append(gj.Targets, m)
		}
		out.Groups = append(out.Groups, gj)
	}
	sort.Slice(out.Groups, func(i, j int) bool { return out.Groups[i].Source < out.Groups[j].Source })
	return out, nil, 0
}

func msParam(r *http.Request, name string, def time.Duration) (time.Duration, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s: not a number of milliseconds: %q", name, s)
	}
	return time.Duration(n) * time.Millisecond, nil
}

func (g *groups) serveTargets(w http.ResponseWriter, r *http.Request) {
	quiet, err := msParam(r, "quiet_ms", 500*time.Millisecond)
	if err == nil {
		var timeout time.Duration
		timeout, err = msParam(r, "timeout_ms", 30*time.Second)
		if err == nil {
			deadline := time.NewTimer(timeout)
			defer deadline.Stop()
			for {
				out, changed, wait := g.snapshot(quiet)
				if out != nil {
					w.Header().Set("Content-Type", "application/json")
					_ = json.NewEncoder(w).Encode(out)
					return
				}
				quietEnds := time.NewTimer(wait)
				select {
				case <-changed:
				case <-quietEnds.C:
				case <-deadline.C:
					quietEnds.Stop()
					http.Error(w, fmt.Sprintf("the discoverer did not settle for %v within %v", quiet, timeout),
						http.StatusServiceUnavailable)
					return
				case <-r.Context().Done():
					quietEnds.Stop()
					return
				}
				quietEnds.Stop()
			}
		}
	}
	http.Error(w, err.Error(), http.StatusBadRequest)
}

func run() error {
	configPath := flag.String("config", "", "one kubernetes_sd_configs entry (YAML)")
	listen := flag.String("listen", "127.0.0.1:0", "loopback address to serve /targets on")
	watchList := flag.String("watch-list", "",
		"true or false: sets KUBE_FEATURE_WatchListClient before client-go reads it (default: the environment's)")
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	switch *watchList {
	case "":
	case "true", "false":
		// client-go reads its KUBE_FEATURE_* variables once, on the first feature check
		// (k8s.io/client-go/features/envvar.go); nothing has checked one yet.
		if err := os.Setenv("KUBE_FEATURE_WatchListClient", *watchList); err != nil {
			return err
		}
	default:
		return fmt.Errorf("--watch-list %q: true or false", *watchList)
	}
	if *showVersion {
		fmt.Println(version)
		return nil
	}
	if *configPath == "" {
		return errors.New("--config is required")
	}
	text, err := os.ReadFile(*configPath)
	if err != nil {
		return err
	}
	var cfg kubernetes.SDConfig
	if err := yaml.UnmarshalStrict(text, &cfg); err != nil {
		return fmt.Errorf("%s: %w", *configPath, err)
	}
	host, _, err := net.SplitHostPort(*listen)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--listen %s: only loopback addresses are served", *listen)
	}

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	reg := prometheus.NewRegistry()
	refresh := discovery.NewRefreshMetrics(reg)
	metrics := cfg.NewDiscovererMetrics(reg, refresh)
	if err := metrics.Register(); err != nil {
		return fmt.Errorf("discoverer metrics: %w", err)
	}
	d, err := cfg.NewDiscoverer(discovery.DiscovererOptions{Logger: logger, Metrics: metrics})
	if err != nil {
		return fmt.Errorf("kubernetes_sd: %w", err)
	}

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	g := &groups{bySrc: map[string]*targetgroup.Group{}, changed: make(chan struct{})}
	ch := make(chan []*targetgroup.Group)
	go d.Run(ctx, ch)
	go func() {
		for {
			select {
			case update := <-ch:
				g.apply(update)
			case <-ctx.Done():
				return
			}
		}
	}()

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/targets", g.serveTargets)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	logger.Info("promsd serving", "addr", ln.Addr().String(), "role", cfg.Role)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "promsd:", err)
		os.Exit(1)
	}
}
