// proxy-informers: N sets of client-go informers shaped like kube-proxy's (Services with
// `!service.kubernetes.io/service-proxy-name` and `spec.clusterIP!=None`, EndpointSlices with
// `!service.kubernetes.io/headless`, its own Node by name, ServiceCIDRs), each set on its own
// connections as N kube-proxies would be, against one server (herald or kube-sim). A writer updates
// Services on the upstream at a fixed rate, stamping each with its send time; the informers'
// handlers record the delivery latency. Writes one JSON report: sync time, events, the client's
// CPU per event, latency percentiles, and the CPU of the server processes named by --pid.
//
// With --resource pods or endpointslices, each set is instead one informer (or, with --watch-only,
// one plain watch) of every Pod or of kube-proxy's EndpointSlices, and the writer updates that
// resource: the client's CPU per event for the big objects kubelets and kube-proxy receive.
//
// A benchmark tool of herald's (bench/kube-proxy-informers.sh), built from upstream modules only.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// The annotation the writer stamps with its send time (ns since the epoch).
const sentAnnotation = "bench.herald.dev/sent-ns"

type report struct {
	Informers        int                `json:"informers"`
	ContentType      string             `json:"content_type"`
	WatchList        string             `json:"watch_list"`
	SyncSeconds      float64            `json:"sync_seconds"`
	WindowSeconds    float64            `json:"window_seconds"`
	Writes           int64              `json:"writes"`
	WriteErrors      int64              `json:"write_errors"`
	Events           int64              `json:"events"`
	Resource         string             `json:"resource"`
	StampedUpdates   int64              `json:"stamped_updates"`
	Client           string             `json:"client"`
	ClientCPUSeconds float64            `json:"client_cpu_seconds"`
	ClientCPUPerEvUs float64            `json:"client_cpu_per_event_us"`
	LatencyP50Ms     float64            `json:"latency_p50_ms"`
	LatencyP99Ms     float64            `json:"latency_p99_ms"`
	LatencySamples   int                `json:"latency_samples"`
	ServerCPUSeconds map[string]float64 `json:"server_cpu_seconds"`
	Nodes            []string           `json:"nodes"`
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the server the informers read (herald's face or kube-sim)")
	writeKubeconfig := flag.String("write-kubeconfig", "", "the upstream the writer updates Services on (kube-sim); default: --kubeconfig")
	n := flag.Int("informers", 100, "informer sets (kube-proxies)")
	protobuf := flag.Bool("protobuf", false, "ask for application/vnd.kubernetes.protobuf, as kube-proxy does by default")
	warmup := flag.Duration("warmup", 5*time.Second, "writes before the measured window")
	window := flag.Duration("seconds", 30*time.Second, "the measured window")
	rate := flag.Float64("rate", 100, "Service updates per second")
	pids := flag.String("pid", "", "server processes to read the CPU of, name=pid,name=pid")
	out := flag.String("json", "", "where to write the report (default stdout)")
	version := flag.Bool("version", false, "print the client-go version and exit")
	watchOnly := flag.Bool("watch-only", false, "instead of informers, each set runs one plain client-go watch of the resource "+
		"(no cache, no handlers): what the watch machinery and decoding cost alone")
	resource := flag.String("resource", "services", "what the sets read and the writer updates: services (kube-proxy's four informers), "+
		"pods (one informer of every Pod) or endpointslices (one informer of kube-proxy's EndpointSlices)")
	flag.Parse()
	if *version {
		fmt.Println("proxy-informers: client-go v0.37.2 (k8s.io/client-go), kube-proxy's informer shapes of k8s.io/kubernetes v1.37.2")
		return
	}
	if *kubeconfig == "" {
		fail("--kubeconfig is required")
	}
	if *writeKubeconfig == "" {
		*writeKubeconfig = *kubeconfig
	}
	// NB: client-go v0.37's generated clients ask for protobuf when the content type is left unset
	// (rest.Request.UseProtobufAsDefaultIfPreferred), so JSON has to be asked for explicitly.
	readCfg := load(*kubeconfig)
	if *protobuf {
		readCfg.ContentType = "application/vnd.kubernetes.protobuf"
		readCfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	} else {
		readCfg.ContentType = "application/json"
		readCfg.AcceptContentTypes = "application/json"
	}
	// The writer sends JSON: kube-sim takes JSON bodies only.
	writeCfg := load(*writeKubeconfig)
	writeCfg.ContentType = "application/json"
	writeCfg.AcceptContentTypes = "application/json"
	writeCfg.QPS, writeCfg.Burst = 10000, 10000
	writer, err := kubernetes.NewForConfig(writeCfg)
	if err != nil {
		fail("writer client: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	nodeList, err := writer.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodeList.Items) == 0 {
		fail("listing nodes: %v", err)
	}
	nodes := make([]string, 0, len(nodeList.Items))
	for _, nd := range nodeList.Items {
		nodes = append(nodes, nd.Name)
	}
	sort.Strings(nodes)

	var events, stamped atomic.Int64
	var measuring atomic.Bool
	var latMu sync.Mutex
	var lat []time.Duration
	onUpdate := func(obj interface{}) {
		events.Add(1)
		m, err := meta.Accessor(obj)
		if err != nil || !measuring.Load() {
			return
		}
		stamped.Add(1)
		if v, ok := m.GetAnnotations()[sentAnnotation]; ok {
			if ns, err := strconv.ParseInt(v, 10, 64); err == nil {
				d := time.Since(time.Unix(0, ns))
				latMu.Lock()
				lat = append(lat, d)
				latMu.Unlock()
			}
		}
	}
	count := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(interface{}) { events.Add(1) },
		UpdateFunc: func(_, _ interface{}) { events.Add(1) },
		DeleteFunc: func(interface{}) { events.Add(1) },
	}
	noProxyName, _ := labels.NewRequirement("service.kubernetes.io/service-proxy-name", selection.DoesNotExist, nil)
	noHeadless, _ := labels.NewRequirement("service.kubernetes.io/headless", selection.DoesNotExist, nil)
	svcLabels := labels.NewSelector().Add(*noProxyName).String()
	sliceLabels := labels.NewSelector().Add(*noHeadless).String()
	svcFields := fields.OneTermNotEqualSelector("spec.clusterIP", corev1.ClusterIPNone).String()
	res, ok := resources(svcLabels, svcFields, sliceLabels)[*resource]
	if !ok {
		fail("--resource %q: expected services, pods or endpointslices", *resource)
	}

	if *n == 0 {
		// Writer only: the bench runs the writer in a process of its own, so that the informers'
		// CPU per event is theirs alone.
		var writes, errs atomic.Int64
		write(ctx, res.updater(ctx, writer), *rate, *warmup+*window, &writes, &errs)
		fmt.Printf("{\"writes\": %d, \"write_errors\": %d}\n", writes.Load(), errs.Load())
		return
	}
	start := time.Now()
	var synced []cache.InformerSynced
	for i := 0; i < *n && *watchOnly; i++ {
		cs := client(readCfg)
		opts := metav1.ListOptions{LabelSelector: res.labels, FieldSelector: res.fields}
		rv := listRV(ctx, res, cs, opts)
		go watchResource(ctx, res, cs, opts, rv, func(ev watch.Event) {
			if ev.Type == watch.Modified {
				onUpdate(ev.Object)
			} else {
				events.Add(1)
			}
		})
	}
	for i := 0; i < *n && !*watchOnly && *resource != "services"; i++ {
		// One informer of the resource per set, with the readers' selectors.
		f := informers.NewSharedInformerFactoryWithOptions(client(readCfg), 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector, o.FieldSelector = res.labels, res.fields
		}))
		inf := res.informer(f)
		inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(interface{}) { events.Add(1) },
			UpdateFunc: func(_, nw interface{}) { onUpdate(nw) },
			DeleteFunc: func(interface{}) { events.Add(1) },
		})
		f.Start(ctx.Done())
		synced = append(synced, inf.HasSynced)
	}
	for i := 0; i < *n && !*watchOnly && *resource == "services"; i++ {
		cs := client(readCfg)
		node := nodes[i%len(nodes)]
		svcF := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector, o.FieldSelector = svcLabels, svcFields
		}))
		sliceF := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = sliceLabels
		}))
		nodeF := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", node).String()
		}))
		plainF := informers.NewSharedInformerFactory(cs, 0)
		si := svcF.Core().V1().Services().Informer()
		si.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(interface{}) { events.Add(1) },
			UpdateFunc: func(_, nw interface{}) { onUpdate(nw) },
			DeleteFunc: func(interface{}) { events.Add(1) },
		})
		ei := sliceF.Discovery().V1().EndpointSlices().Informer()
		ei.AddEventHandler(count)
		ni := nodeF.Core().V1().Nodes().Informer()
		ni.AddEventHandler(count)
		ci := plainF.Networking().V1().ServiceCIDRs().Informer()
		ci.AddEventHandler(count)
		for _, f := range []informers.SharedInformerFactory{svcF, sliceF, nodeF, plainF} {
			f.Start(ctx.Done())
		}
		synced = append(synced, si.HasSynced, ei.HasSynced, ni.HasSynced, ci.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		fail("informers did not sync")
	}
	syncSeconds := time.Since(start).Seconds()
	fmt.Fprintf(os.Stderr, "proxy-informers: %d sets synced in %.1f s\n", *n, syncSeconds)

	var writes, writeErrs atomic.Int64
	if *rate > 0 {
		go write(ctx, res.updater(ctx, writer), *rate, 0, &writes, &writeErrs)
	}
	time.Sleep(*warmup)

	serverPids := parsePids(*pids)
	cpu0 := selfCPU()
	srv0 := serverCPU(serverPids)
	ev0 := events.Load()
	measuring.Store(true)
	t0 := time.Now()
	time.Sleep(*window)
	measuring.Store(false)
	elapsed := time.Since(t0).Seconds()
	cpu1 := selfCPU()
	srv1 := serverCPU(serverPids)
	ev := events.Load() - ev0

	latMu.Lock()
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	r := report{
		Informers:        *n,
		ContentType:      map[bool]string{true: "protobuf", false: "json"}[*protobuf],
		Client:           map[bool]string{true: "watch", false: "informers"}[*watchOnly],
		WatchList:        os.Getenv("KUBE_FEATURE_WatchListClient"),
		SyncSeconds:      syncSeconds,
		WindowSeconds:    elapsed,
		Writes:           writes.Load(),
		WriteErrors:      writeErrs.Load(),
		Events:           ev,
		Resource:         *resource,
		StampedUpdates:   stamped.Load(),
		ClientCPUSeconds: cpu1 - cpu0,
		LatencyP50Ms:     pct(lat, 0.50),
		LatencyP99Ms:     pct(lat, 0.99),
		LatencySamples:   len(lat),
		ServerCPUSeconds: map[string]float64{},
		Nodes:            nodes[:min(len(nodes), *n)],
	}
	latMu.Unlock()
	if ev > 0 {
		r.ClientCPUPerEvUs = (cpu1 - cpu0) / float64(ev) * 1e6
	}
	for name := range srv1 {
		r.ServerCPUSeconds[name] = srv1[name] - srv0[name]
	}
	b, _ := json.MarshalIndent(r, "", "  ")
	if *out == "" {
		fmt.Println(string(b))
	} else if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
		fail("writing %s: %v", *out, err)
	}
}

// write calls update at `rate` per second for `d` (0: until ctx ends), counting the writes done and
// failed.
func write(ctx context.Context, update func(i int) error, rate float64, d time.Duration, writes, errs *atomic.Int64) {
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	var end <-chan time.Time
	if d > 0 {
		end = time.After(d)
	}
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-end:
			return
		case <-tick.C:
		}
		if err := update(i); err != nil {
			if errs.Add(1) <= 3 {
				fmt.Fprintf(os.Stderr, "proxy-informers: %v\n", err)
			}
			continue
		}
		writes.Add(1)
	}
}

// resource is what the sets read and the writer updates.
type resource struct {
	labels, fields string
	list           func(context.Context, kubernetes.Interface, metav1.ListOptions) (metav1.ListInterface, error)
	watch          func(context.Context, kubernetes.Interface, metav1.ListOptions) (watch.Interface, error)
	informer       func(informers.SharedInformerFactory) cache.SharedIndexInformer
	// updater lists the objects the readers see and returns a function that updates the i-th
	// (round-robin), stamping it with its send time.
	updater func(context.Context, kubernetes.Interface) func(int) error
}

func resources(svcLabels, svcFields, sliceLabels string) map[string]resource {
	return map[string]resource{
		"services": {
			labels: svcLabels, fields: svcFields,
			list: func(ctx context.Context, cs kubernetes.Interface, o metav1.ListOptions) (metav1.ListInterface, error) {
				return cs.CoreV1().Services("").List(ctx, o)
			},
			watch: func(ctx context.Context, cs kubernetes.Interface, o metav1.ListOptions) (watch.Interface, error) {
				return cs.CoreV1().Services("").Watch(ctx, o)
			},
			informer: func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
				return f.Core().V1().Services().Informer()
			},
			updater: func(ctx context.Context, w kubernetes.Interface) func(int) error {
				l, err := w.CoreV1().Services("").List(ctx, metav1.ListOptions{LabelSelector: svcLabels, FieldSelector: svcFields})
				return updater(ctx, "Services", l, err, func(l *corev1.ServiceList) []corev1.Service { return l.Items },
					func(ctx context.Context, o *corev1.Service) (*corev1.Service, error) {
						return w.CoreV1().Services(o.Namespace).Update(ctx, o, metav1.UpdateOptions{})
					},
					func(ctx context.Context, ns, name string) (*corev1.Service, error) {
						return w.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
					})
			},
		},
		"pods": {
			list: func(ctx context.Context, cs kubernetes.Interface, o metav1.ListOptions) (metav1.ListInterface, error) {
				return cs.CoreV1().Pods("").List(ctx, o)
			},
			watch: func(ctx context.Context, cs kubernetes.Interface, o metav1.ListOptions) (watch.Interface, error) {
				return cs.CoreV1().Pods("").Watch(ctx, o)
			},
			informer: func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
				return f.Core().V1().Pods().Informer()
			},
			updater: func(ctx context.Context, w kubernetes.Interface) func(int) error {
				l, err := w.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
				return updater(ctx, "Pods", l, err, func(l *corev1.PodList) []corev1.Pod { return l.Items },
					func(ctx context.Context, o *corev1.Pod) (*corev1.Pod, error) {
						return w.CoreV1().Pods(o.Namespace).Update(ctx, o, metav1.UpdateOptions{})
					},
					func(ctx context.Context, ns, name string) (*corev1.Pod, error) {
						return w.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
					})
			},
		},
		"endpointslices": {
			labels: sliceLabels,
			list: func(ctx context.Context, cs kubernetes.Interface, o metav1.ListOptions) (metav1.ListInterface, error) {
				return cs.DiscoveryV1().EndpointSlices("").List(ctx, o)
			},
			watch: func(ctx context.Context, cs kubernetes.Interface, o metav1.ListOptions) (watch.Interface, error) {
				return cs.DiscoveryV1().EndpointSlices("").Watch(ctx, o)
			},
			informer: func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
				return f.Discovery().V1().EndpointSlices().Informer()
			},
			updater: func(ctx context.Context, w kubernetes.Interface) func(int) error {
				l, err := w.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{LabelSelector: sliceLabels})
				return updater(ctx, "EndpointSlices", l, err, func(l *discoveryv1.EndpointSliceList) []discoveryv1.EndpointSlice { return l.Items },
					func(ctx context.Context, o *discoveryv1.EndpointSlice) (*discoveryv1.EndpointSlice, error) {
						return w.DiscoveryV1().EndpointSlices(o.Namespace).Update(ctx, o, metav1.UpdateOptions{})
					},
					func(ctx context.Context, ns, name string) (*discoveryv1.EndpointSlice, error) {
						return w.DiscoveryV1().EndpointSlices(ns).Get(ctx, name, metav1.GetOptions{})
					})
			},
		},
	}
}

// updater returns a function that updates the i-th of the listed objects (round-robin), stamping it
// with its send time; an update that fails refreshes that object from a get for its next turn.
func updater[L any, T any, P interface {
	*T
	metav1.Object
}](ctx context.Context, what string, list *L, err error, items func(*L) []T,
	update func(context.Context, P) (P, error), get func(context.Context, string, string) (P, error)) func(int) error {
	if err != nil {
		fail("listing %s to update: %v", what, err)
	}
	objs := items(list)
	if len(objs) == 0 {
		fail("no %s to update", what)
	}
	return func(i int) error {
		o := P(&objs[i%len(objs)])
		a := o.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		a[sentAnnotation] = strconv.FormatInt(time.Now().UnixNano(), 10)
		o.SetAnnotations(a)
		got, err := update(ctx, o)
		if err != nil {
			if fresh, gerr := get(ctx, o.GetNamespace(), o.GetName()); gerr == nil {
				*o = *fresh
			}
			return fmt.Errorf("updating %s %s/%s: %w", what, o.GetNamespace(), o.GetName(), err)
		}
		*o = *got
		return nil
	}
}

// client is one set's clientset. A Dial of its own keeps client-go from sharing one cached transport
// (and its connections) between the sets: each set is a separate kube-proxy.
func client(readCfg *rest.Config) *kubernetes.Clientset {
	cfg := rest.CopyConfig(readCfg)
	cfg.QPS, cfg.Burst = 1000, 1000
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	cfg.Dial = d.DialContext
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fail("client: %v", err)
	}
	return cs
}

// listRV is the resourceVersion of a one-item list of the resource: where a watch of what changes
// from now on starts (no initial events).
func listRV(ctx context.Context, res resource, cs *kubernetes.Clientset, opts metav1.ListOptions) string {
	opts.Limit = 1
	list, err := res.list(ctx, cs, opts)
	if err != nil {
		fail("listing: %v", err)
	}
	return list.GetResourceVersion()
}

// watchResource watches the resource from rv until ctx ends, handing every event to onEvent; a watch
// the server ends is resumed from the last resourceVersion seen, an expired one from a new list.
func watchResource(ctx context.Context, res resource, cs *kubernetes.Clientset, opts metav1.ListOptions, rv string, onEvent func(watch.Event)) {
	for ctx.Err() == nil {
		o := opts
		o.ResourceVersion, o.AllowWatchBookmarks = rv, true
		w, err := res.watch(ctx, cs, o)
		if err != nil {
			time.Sleep(time.Second)
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				rv = listRV(ctx, res, cs, opts)
				break
			}
			if m, err := meta.Accessor(ev.Object); err == nil {
				rv = m.GetResourceVersion()
			}
			if ev.Type != watch.Bookmark {
				onEvent(ev)
			}
		}
		w.Stop()
	}
}

func load(path string) *rest.Config {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		fail("kubeconfig %s: %v", path, err)
	}
	return cfg
}

func pct(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return float64(sorted[i].Microseconds()) / 1000
}

func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

func parsePids(s string) map[string]string {
	m := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if name, pid, ok := strings.Cut(kv, "="); ok {
			m[name] = pid
		}
	}
	return m
}

// serverCPU reads utime+stime of each process from /proc/PID/stat (clock ticks of 1/100 s).
func serverCPU(pids map[string]string) map[string]float64 {
	out := map[string]float64{}
	for name, pid := range pids {
		b, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		// Fields after the command name (which may hold spaces) start after the last ')'.
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) > 12 {
			ut, _ := strconv.ParseFloat(f[11], 64)
			st, _ := strconv.ParseFloat(f[12], 64)
			out[name] = (ut + st) / 100
		}
	}
	return out
}

func fail(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "proxy-informers: "+format+"\n", a...)
	os.Exit(1)
}
